// Raw, gzip and brotli size of each built file against its gzip budget, measured two ways: zlib
// at level 9 (what a server's gzip sends, no header name) and the `gzip -9` command, whose header
// also carries the file name; both must stay within the budget. Exits 1 when a file is over.
//   t.min.js         the core snippet (/t.js): 1 KB, the design's first goal
//   t.vitals.min.js  the optional Core Web Vitals extension (/t.vitals.js): 4.5 KB; Google's
//                    web-vitals alone (all five metrics) is about 3.3 KB of it
const fs = require('fs');
const zlib = require('zlib');
const path = require('path');
const { execFileSync } = require('child_process');

const BUDGETS = { 't.min.js': 1024, 't.vitals.min.js': 4608 };
let over = false;
for (const [name, budget] of Object.entries(BUDGETS)) {
  const file = path.join(__dirname, '..', 'ingest', 'static', name);
  const built = fs.readFileSync(file);
  const gzip = zlib.gzipSync(built, { level: 9 }).length;
  const gzipCommand = execFileSync('gzip', ['-9', '-c', file]).length;
  const brotli = zlib.brotliCompressSync(built).length;
  const verdict = Math.max(gzip, gzipCommand) <= budget ? 'ok' : 'OVER BUDGET';
  console.log(
    `${name}: raw ${built.length} B, gzip ${gzip} B, gzip -9 ${gzipCommand} B, brotli ${brotli} B (budget: gzip <= ${budget} B) ${verdict}`
  );
  over ||= verdict != 'ok';
}
process.exit(over ? 1 : 0);
