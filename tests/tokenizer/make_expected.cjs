// Reference token ids from the real tiktoken (the npm package) for tiktoken_compare_test.
// Usage: node make_expected.cjs <tiktoken package dir> <corpus.json> <out dir>
// Writes, per encoding, <enc>.ranks (the package's bpe_ranks, verbatim), <enc>.specials
// ("<id> <text>" lines) and <enc>.pat (pat_str); and expected.tsv with one case per line:
//   <encoding> \t <allow_special 0|1> \t <base64 of the UTF-8 text> \t <ids, space separated>
'use strict';
const fs = require('fs');
const path = require('path');

const [pkgDir, corpusPath, outDir] = process.argv.slice(2);
const { get_encoding } = require(pkgDir);
const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));

// Long runs (deterministic): the BPE heap path and the regex on long inputs. Kept to a few
// thousand characters because tiktoken's own merge loop is quadratic.
function generated() {
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const b64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  let blob = '';
  for (let i = 0; i < 4000; ++i) blob += b64[Math.floor(rand() * 64)];
  return [
    ' '.repeat(5000) + 'x', '\n'.repeat(3000), 'a'.repeat(3000), 'ab'.repeat(2000),
    '1'.repeat(3000), '中'.repeat(2000), 'あ'.repeat(2000), '🙂'.repeat(1000),
    '  \t '.repeat(1000) + 'end', 'Supercalifragilisticexpialidocious'.repeat(100), blob,
    'x' + '\u0301'.repeat(500), '!'.repeat(3000) + '\n'.repeat(10),
  ];
}

const cases = [
  ...corpus.plain.map((t) => [t, false]),
  ...generated().map((t) => [t, false]),
  ...corpus.special.map((t) => [t, true]),
];
const lines = [];
for (const name of ['cl100k_base', 'o200k_base']) {
  const data = require(path.join(pkgDir, 'encoders', name + '.json'));
  fs.writeFileSync(path.join(outDir, name + '.ranks'), data.bpe_ranks);
  fs.writeFileSync(path.join(outDir, name + '.pat'), data.pat_str);
  fs.writeFileSync(path.join(outDir, name + '.specials'),
                   Object.entries(data.special_tokens).map(([t, id]) => `${id} ${t}\n`).join(''));
  const enc = get_encoding(name);
  for (const [text, allow] of cases) {
    // Plain cases treat special-token text as ordinary text (no allowed, no disallowed).
    const ids = allow ? enc.encode(text, 'all') : enc.encode(text, [], []);
    lines.push([name, allow ? 1 : 0, Buffer.from(text, 'utf8').toString('base64'),
                Array.from(ids).join(' ')].join('\t'));
  }
  enc.free();
}
fs.writeFileSync(path.join(outDir, 'expected.tsv'), lines.join('\n') + '\n');
