/* Tally's Core Web Vitals extension (source). `npm run build:vitals` bundles it with Google's
   web-vitals into ingest/static/t.vitals.min.js, served at /t.vitals.js. Load it beside /t.js:
   <script defer data-site="example.com" src="https://tally.example.com/t.js"></script>
   <script defer data-site="example.com" src="https://tally.example.com/t.vitals.js"></script>
   Same attributes as t.js: data-hash, data-local, data-automation, data-dnt.
   One `vitals` beacon per page view, sent when the page is hidden: LCP, INP, CLS, FCP, TTFB
   (those measured) and the deepest scroll position (sd, percent). Wire format: ingest/PAYLOAD.md.
   Single-page apps: web-vitals measures the document's first page view only. A navigation
   (pushState, replaceState, popstate; hashchange with data-hash) sends the pending beacon of the
   previous URL (what was measured so far, and its scroll depth); later page views carry scroll
   depth only. Updates after a page view's beacon was sent (a tab shown again, a bfcache restore)
   are dropped: one beacon per page view. */
import { onCLS, onFCP, onINP, onLCP, onTTFB } from 'web-vitals';

((w, d) => {
  const s = d.currentScript, n = navigator, l = location, has = (a) => s.hasAttribute('data-' + a),
    on = (t, e, f, o) => t.addEventListener(e, f, o), hash = has('hash'),
    why = n.webdriver && !has('automation') ? 'automation'
      : /^(localhost|127\.|\[::1\])/.test(l.hostname) && !has('local') ? 'localhost'
        : has('dnt') && (n.doNotTrack == '1' || n.globalPrivacyControl) ? 'opt-out' : 0;
  if (why) return console.log('tally vitals: ' + why);
  const api = new URL(s.src).origin + '/api/event',
    key = () => hash ? l.href : l.href.split('#')[0],
    // A random UUID; blob: URLs end in one where randomUUID is missing (plain-http pages).
    uid = () => crypto.randomUUID?.() || URL.createObjectURL(new Blob).slice(-36),
    fresh = () => ({ u: l.href, k: key(), m: {}, sd: 0 }),
    first = fresh();
  let view = first, timer = 0;
  // Percent of the document's height seen so far: the bottom of the viewport, deepest yet.
  const depth = () => {
      const h = d.documentElement.scrollHeight;
      timer = 0;
      h && (view.sd = Math.max(view.sd, Math.min(100, Math.round((scrollY + innerHeight) / h * 100))));
    },
    send = () => {
      if (view.sent) return;
      view.sent = 1;
      depth();
      const t = Date.now(), b = JSON.stringify({
        id: uid(), k: 'vitals', s: s.getAttribute('data-site'), u: view.u, r: d.referrer, te: t, ts: t,
        w: screen.width, l: n.language, z: Intl.DateTimeFormat().resolvedOptions().timeZone, ...view.m, sd: view.sd
      });
      // A string body is sent as text/plain: a "simple" request, so no CORS preflight.
      n.sendBeacon?.(api, b) || fetch(api, { method: 'POST', body: b, keepalive: true });
    },
    // Every change is kept (reportAllChanges), so the values are current whenever the page hides;
    // values for the first page view that arrive once its beacon is sent are dropped.
    metric = (x) => first.sent || (first.m[x.name.toLowerCase()] = x.name == 'CLS'
      ? Math.round(x.value * 1e4) / 1e4 : Math.round(x.value)),
    navigated = () => { if (key() != view.k) { send(); view = fresh(); } };
  for (const f of [onLCP, onINP, onCLS, onFCP, onTTFB]) f(metric, { reportAllChanges: true });
  for (const f of ['pushState', 'replaceState']) {
    const o = history[f];
    history[f] = function () { o.apply(this, arguments); navigated(); };
  }
  on(w, 'popstate', navigated);
  hash && on(w, 'hashchange', navigated);
  on(w, 'scroll', () => timer ||= setTimeout(depth, 100), { passive: true });
  // On document, not window: web-vitals flushes CLS and INP in a capturing listener on window,
  // which runs first. An unload (navigation, close) fires pagehide before visibilitychange, so
  // that beacon has what the observers delivered until then.
  on(d, 'visibilitychange', () => d.hidden && send());
  on(w, 'pagehide', send);
})(window, document);
