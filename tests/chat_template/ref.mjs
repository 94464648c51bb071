// ref.mjs — renders a chat template with @huggingface/jinja (transformers.js's
// Jinja), the reference our C interpreter is compared against.
//   node tests/chat_template/ref.mjs TEMPLATE VARS.json        (render to stdout)
//   node tests/chat_template/ref.mjs --gen DIR SHARED           (write DIR/*.expected
//                                                                 for every line of DIR/cases.txt)
// TEMPLATE is a .jinja file, or a tokenizer_config.json whose "chat_template"
// is used; "shared:" at its start means the SHARED data directory.
// Output is written as raw bytes, no newline added; an error prints
// "ERROR: <message>" to stderr and exits 2.
import fs from "node:fs";
import path from "node:path";
import url from "node:url";

const here = path.dirname(url.fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const jinjaPath = path.join(root, ".deps/npm/node_modules/@huggingface/jinja/dist/index.js");
const { Template } = await import(url.pathToFileURL(jinjaPath).href);

function loadTemplate(file, shared) {
  if (file.startsWith("shared:")) file = path.join(shared, file.slice(7));
  const text = fs.readFileSync(file, "utf8");
  return file.endsWith(".json") ? JSON.parse(text).chat_template : text;
}

// "qwen3.5.jinja" -> "qwen3.5"; "shared:data/qwen3-tokenizer/tokenizer_config.json" -> "qwen3-tokenizer"
export function caseName(tname) {
  const base = path.basename(tname);
  return base === "tokenizer_config.json" ? path.basename(path.dirname(tname)) : base.replace(/\.jinja$/, "");
}

function render(templateFile, varsFile, shared) {
  const template = new Template(loadTemplate(templateFile, shared));
  return template.render(JSON.parse(fs.readFileSync(varsFile, "utf8")));
}

const args = process.argv.slice(2);
if (args[0] === "--gen") {
  const dir = args[1], shared = args[2];
  const lines = fs.readFileSync(path.join(dir, "cases.txt"), "utf8").split("\n");
  let n = 0;
  for (const line of lines) {
    const f = line.trim().split(/\s+/);
    if (!f[0] || f[0].startsWith("#")) continue;
    const [tname, vname] = f;
    const tfile = tname.startsWith("shared:") ? tname : path.join(dir, tname);
    const out = path.join(dir, "expected", `${caseName(tname)}__${vname.replace(/\.json$/, "")}.expected`);
    let text;
    try {
      text = render(tfile, path.join(dir, "vars", vname), shared);
    } catch (e) {
      text = "ERROR\n";
    }
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, text);
    n++;
  }
  console.log(`${n} expected files written`);
} else {
  try {
    process.stdout.write(render(args[0], args[1], process.env.SHARED || path.join(root, "../shared")));
  } catch (e) {
    process.stderr.write(`ERROR: ${e.message}\n`);
    process.exit(2);
  }
}
