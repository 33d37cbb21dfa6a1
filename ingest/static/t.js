/* Tally tracker. <script defer data-site="example.com" src="https://tally.example.com/t.js"></script>
   Wire format: ingest/PAYLOAD.md. No cookies, no storage. */
(function (w, d) {
  var s = d.currentScript, n = w.navigator, l = w.location, site = s.getAttribute('data-site'),
    api = s.getAttribute('data-api') || new URL(s.src).origin + '/api/event',
    hash = s.hasAttribute('data-hash'), shown = 0, visible = 0, page;
  function uid() {
    var b = crypto.getRandomValues(new Uint8Array(16)), h = '', i = 0;
    b[6] = b[6] & 15 | 64; b[8] = b[8] & 63 | 128;
    for (; i < 16; i++) h += (b[i] + 256).toString(16).slice(1) + ([3, 5, 7, 9].indexOf(i) + 1 ? '-' : '');
    return h;
  }
  function skip() {
    return n.webdriver && !s.hasAttribute('data-automation') ? 'automation' :
      /^(localhost|127\.|\[::1\])/.test(l.hostname) && !s.hasAttribute('data-local') ? 'localhost' :
      s.hasAttribute('data-respect-dnt') && (n.doNotTrack == '1' || n.globalPrivacyControl) ? 'opt-out' : 0;
  }
  function send(k, x) {
    var why = skip(), t = Date.now(), e = {
      v: 1, id: uid(), k: k, s: site, u: l.href, r: d.referrer || null, ti: d.title, te: t, ts: t,
      w: screen.width, l: n.language, z: Intl.DateTimeFormat().resolvedOptions().timeZone
    }, b;
    if (why) return console.debug('tally: skipped ' + k + ' (' + why + ')');
    for (b in x) e[b] = x[b];
    b = JSON.stringify(e);
    if (!(n.sendBeacon && n.sendBeacon(api, new Blob([b], { type: 'text/plain' }))))
      fetch(api, { method: 'POST', body: b, keepalive: true, headers: { 'Content-Type': 'text/plain' } });
  }
  function engaged() {
    if (shown) visible += Date.now() - shown;
    shown = 0;
    if (visible > 0) send('engagement', { e: visible });
    visible = 0;
  }
  function view() {
    var key = hash ? l.href : l.href.split('#')[0], t = performance.getEntriesByType('navigation')[0];
    if (key == page) return;
    if (page) engaged();
    page = key; shown = d.visibilityState == 'visible' ? Date.now() : 0;
    send('pageview', t && t.loadEventEnd ? { ld: Math.round(t.loadEventEnd) } : {});
  }
  w.tally = function (name, props) { send('event', { n: name, p: props || {} }); };
  ['pushState', 'replaceState'].forEach(function (f) {
    var o = history[f];
    history[f] = function () { o.apply(this, arguments); view(); };
  });
  w.addEventListener('popstate', view);
  if (hash) w.addEventListener('hashchange', view);
  d.addEventListener('visibilitychange', function () {
    d.visibilityState == 'hidden' ? engaged() : shown = Date.now();
  });
  w.addEventListener('pagehide', engaged);
  d.addEventListener('click', function (ev) {
    var a = ev.target.closest && ev.target.closest('a[href]'), u = a && new URL(a.href, l.href);
    if (!u) return;
    if (u.host != l.host && /^https?:/.test(u.protocol)) send('event', { n: 'Outbound Link', p: { url: u.href } });
    else if (/\.(pdf|zip|docx?|xlsx?|pptx?|csv|dmg|exe|mp[34])$/i.test(u.pathname)) send('event', { n: 'File Download', p: { url: u.href } });
  });
  d.readyState == 'complete' ? view() : w.addEventListener('load', view);
})(window, document);
