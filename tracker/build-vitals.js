// Bundles vitals.js with web-vitals into one minified IIFE: ingest/static/t.vitals.min.js, or the
// file named by the first argument (the freshness test builds to a temporary file and compares).
const path = require('path');
const esbuild = require('esbuild');
const { version } = require('./node_modules/web-vitals/package.json');

esbuild.buildSync({
  entryPoints: [path.join(__dirname, 'vitals.js')],
  outfile: process.argv[2] || path.join(__dirname, '..', 'ingest', 'static', 't.vitals.min.js'),
  bundle: true,
  format: 'iife',
  minify: true,
  target: 'es2022', // class fields, as web-vitals' own build ships them
  legalComments: 'none',
  // web-vitals ships no licence comment in its build; Apache-2.0 asks for the notice.
  banner: { js: `/*! Tally vitals; web-vitals ${version} (c) Google LLC, Apache-2.0 */` },
  logLevel: 'warning',
});
