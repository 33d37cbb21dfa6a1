// Raw, gzip and brotli size of the built snippet against the 1 KB gzip budget.
const fs = require('fs');
const zlib = require('zlib');
const path = require('path');
const built = fs.readFileSync(path.join(__dirname, '..', 'ingest', 'static', 't.min.js'));
const gzip = zlib.gzipSync(built, { level: 9 }).length;
const brotli = zlib.brotliCompressSync(built).length;
console.log(`t.min.js: raw ${built.length} B, gzip ${gzip} B, brotli ${brotli} B (budget: gzip <= 1024 B)`);
process.exit(gzip <= 1024 ? 0 : 1);
