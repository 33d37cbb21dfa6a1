// Raw, gzip and brotli size of the built snippet against the 1 KB gzip budget, measured two ways:
// zlib at level 9 (what a server's gzip sends, no header name) and the `gzip -9` command, whose
// header also carries the file name; both must stay within the budget.
const fs = require('fs');
const zlib = require('zlib');
const path = require('path');
const { execFileSync } = require('child_process');
const file = path.join(__dirname, '..', 'ingest', 'static', 't.min.js');
const built = fs.readFileSync(file);
const gzip = zlib.gzipSync(built, { level: 9 }).length;
const gzipCommand = execFileSync('gzip', ['-9', '-c', file]).length;
const brotli = zlib.brotliCompressSync(built).length;
console.log(
  `t.min.js: raw ${built.length} B, gzip ${gzip} B, gzip -9 ${gzipCommand} B, brotli ${brotli} B (budget: gzip <= 1024 B)`
);
process.exit(Math.max(gzip, gzipCommand) <= 1024 ? 0 : 1);
