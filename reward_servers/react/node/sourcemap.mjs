// The source-map decoder: a runtime error's stack frames in the bundle -> the component lines they come from.
// esbuild's map is decoded once per render; a generated (line, column) looks up its component line.
const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
function decodeMap(mapText) {
  const map = JSON.parse(mapText);
  const src = map.sources.findIndex((x) => x.endsWith('component.tsx'));
  const lines = [];
  let srcIdx = 0, srcLine = 0;
  for (const group of map.mappings.split(';')) {
    const segs = [];
    let genCol = 0;
    for (const seg of group.split(',')) {
      if (!seg) continue;
      const vals = [];
      let v = 0, shift = 0;
      for (const ch of seg) {
        const d = B64.indexOf(ch);
        v += (d & 31) << shift;
        if (d & 32) { shift += 5; } else { vals.push(v & 1 ? -(v >>> 1) : v >>> 1); v = 0; shift = 0; }
      }
      genCol += vals[0];
      if (vals.length >= 4) { srcIdx += vals[1]; srcLine += vals[2]; segs.push([genCol, srcIdx, srcLine]); }
    }
    lines.push(segs);
  }
  return { src, lines };
}

function componentLine(decoded, line, column) {
  // line, column: 1-based positions in the bundle (as in V8 stack traces)
  const segs = decoded.lines[line - 1];
  if (!segs || !segs.length) return null;
  let hit = null;
  for (const sg of segs) { if (sg[0] <= column - 1) hit = sg; else break; }
  if (!hit) hit = segs[0];
  return hit[1] === decoded.src ? hit[2] + 1 : null;
}

export function runtimeLines(errors, mapText) {
  if (!mapText) return [];
  let decoded;
  try { decoded = decodeMap(mapText); } catch { return []; }
  if (decoded.src < 0) return [];
  const out = [];
  for (const e of errors) {
    for (const m of String(e.stack || '').matchAll(/bundle\.js:(\d+):(\d+)/g)) {
      const ln = componentLine(decoded, Number(m[1]), Number(m[2]));
      if (ln) { if (!out.includes(ln)) out.push(ln); break; } // innermost frame inside the component
    }
  }
  return out;
}
