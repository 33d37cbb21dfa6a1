/* Tally tracker (source). `npm run build` writes the minified ingest/static/t.min.js that /t.js serves.
   <script defer data-site="example.com" src="https://tally.example.com/t.js"></script>
   Options (attributes): data-hash (hash routing), data-local (count localhost),
   data-automation (count webdriver), data-dnt (honour Do-Not-Track / Global Privacy Control).
   Wire format: ingest/PAYLOAD.md. No cookies, no storage. */
((w, d) => {
  const s = d.currentScript, n = navigator, l = location, has = (a) => s.hasAttribute('data-' + a),
    on = (t, e, f) => t.addEventListener(e, f), now = Date.now,
    api = new URL(s.src).origin + '/api/event', hash = has('hash');
  let shown = 0, visible = 0, page;
  // A random UUID; blob: URLs end in one where randomUUID is missing (plain-http pages).
  const uid = () => crypto.randomUUID?.() || URL.createObjectURL(new Blob).slice(-36),
    skip = () => n.webdriver && !has('automation') ? 'automation'
      : /^(localhost|127\.|\[::1\])/.test(l.hostname) && !has('local') ? 'localhost'
        : has('dnt') && (n.doNotTrack == '1' || n.globalPrivacyControl) ? 'opt-out' : 0,
    send = (k, x) => {
      const why = skip(), t = now();
      if (why) return console.log('tally: ' + why);
      const b = JSON.stringify({
        id: uid(), k, s: s.getAttribute('data-site'), u: l.href, r: d.referrer, ti: d.title,
        te: t, ts: t, w: screen.width, l: n.language, z: Intl.DateTimeFormat().resolvedOptions().timeZone, ...x
      });
      // A string body is sent as text/plain: a "simple" request, so no CORS preflight.
      n.sendBeacon?.(api, b) || fetch(api, { method: 'POST', body: b, keepalive: true });
    },
    engaged = () => {
      if (shown) visible += now() - shown;
      shown = 0;
      if (visible) send('engagement', { e: visible });
      visible = 0;
    },
    view = () => {
      const key = hash ? l.href : l.href.split('#')[0],
        // Load time only for the document's own first view, not for single-page-app navigations.
        x = page ? {} : { ld: performance.getEntriesByType('navigation')[0]?.loadEventEnd | 0 };
      if (key == page) return;
      page && engaged();
      page = key;
      shown = d.hidden ? 0 : now();
      send('pageview', x);
    };
  w.tally = (name, props) => send('event', { n: name, p: props || {} });
  for (const f of ['pushState', 'replaceState']) {
    const o = history[f];
    history[f] = function () { o.apply(this, arguments); view(); };
  }
  on(w, 'popstate', view);
  hash && on(w, 'hashchange', view);
  on(d, 'visibilitychange', () => d.hidden ? engaged() : shown = now());
  on(w, 'pagehide', engaged);
  on(d, 'click', (e) => {
    const a = e.target.closest?.('a[href]'), u = a && new URL(a.href, l.href);
    u && (u.host != l.host && /^http/.test(u.protocol) ? send('event', { n: 'Outbound Link', p: { url: u.href } })
      : /\.(pdf|zip|csv|docx?|xlsx?|dmg|exe)$/i.test(u.pathname)
      && send('event', { n: 'File Download', p: { url: u.href } }));
  });
  // After the load event has ended, so that Navigation Timing has loadEventEnd.
  d.readyState == 'complete' ? view() : on(w, 'load', () => setTimeout(view));
})(window, document);
