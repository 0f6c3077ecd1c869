// Validates Kubernetes objects against the upstream 1.36 schemas of kubernetes-models@5.1.0
// (scripts/tools/package-lock.json) and lists every field those schemas do not know.
//
// usage: node validate.mjs ITEMS.json
//   ITEMS.json: [{"name": "...", "object": {...}, "crd": {...}?}, ...]; "crd" (a
//   CustomResourceDefinition) validates a custom resource against the CRD's own
//   openAPIV3Schema instead of a built-in kind.
// Prints one JSON array: [{"name", "kind", "errors": ["/spec/x must be string", ...],
//   "unknown": ["spec.devices[0].includes", ...]}, ...]. Exit 0 unless the input is unreadable;
//   the caller decides which errors and unknown fields are expected.
//
// Why two checks: the generated validators accept any property they do not list (the OpenAPI
// schemas have no additionalProperties: false), while the API server with strict field
// validation refuses them (or silently drops them without it). So the unknown-field walk reads
// each type's property list from the package's generated .d.ts interfaces, which list exactly
// the schema's properties and the type of each (nested interfaces, arrays, string maps).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const NM = process.env.TOPODRA_NODE_MODULES;
if (!NM || !fs.existsSync(path.join(NM, "kubernetes-models"))) {
  console.error(`validate.mjs: TOPODRA_NODE_MODULES="${NM}" has no kubernetes-models`);
  process.exit(2);
}
const KM = path.join(NM, "kubernetes-models");

// The directory of package `name` as Node finds it from `fromDir`: the nearest
// node_modules/<name> walking up. Packages kubernetes-models depends on are looked up from where
// it is, never assumed at the top of NM: npm may nest them (another version of the same package
// elsewhere in the tree) instead of hoisting them.
function packageDir(fromDir, name) {
  for (let d = fromDir; ; d = path.dirname(d)) {
    const candidate = path.join(d, "node_modules", name);
    if (fs.existsSync(path.join(candidate, "package.json"))) return candidate;
    if (path.dirname(d) === d) throw new Error(`package ${name} not found from ${fromDir}`);
  }
}

// "@scope/pkg/a/b" or "pkg/a/b" -> ["@scope/pkg" | "pkg", "a/b"]
function splitSpecifier(spec) {
  const parts = spec.split("/");
  const n = spec.startsWith("@") ? 2 : 1;
  return [parts.slice(0, n).join("/"), parts.slice(n).join("/")];
}

const APIMACHINERY = packageDir(KM, "@kubernetes-models/apimachinery");

// ---- .d.ts reading -------------------------------------------------------------------------

function tokenize(text) {
  const tokens = [];
  const re = /\s+|"((?:[^"\\]|\\.)*)"|([A-Za-z_$][\w$]*)|(.)/gy;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m[1] !== undefined) tokens.push({ t: "str", v: m[1] });
    else if (m[2] !== undefined) tokens.push({ t: "id", v: m[2] });
    else if (m[3] !== undefined) tokens.push({ t: "p", v: m[3] });
  }
  return tokens;
}

class TypeParser {
  constructor(text, where) {
    this.toks = tokenize(text);
    this.i = 0;
    this.where = where;
  }
  peek(k = 0) {
    return this.toks[this.i + k];
  }
  next() {
    return this.toks[this.i++];
  }
  expect(v) {
    const t = this.next();
    if (!t || t.v !== v) {
      throw new Error(`${this.where}: expected "${v}", got ${JSON.stringify(t)}`);
    }
  }
  union() {
    const alts = [this.primary()];
    while (this.peek() && this.peek().v === "|") {
      this.next();
      alts.push(this.primary());
    }
    return alts.length === 1 ? alts[0] : { k: "union", alts };
  }
  primary() {
    const t = this.next();
    if (!t) throw new Error(`${this.where}: type expected at the end`);
    if (t.t === "str") return { k: "prim" };
    if (t.v === "{") {
      // { [key: string]: T; }
      this.expect("[");
      this.next();
      this.expect(":");
      this.next();
      this.expect("]");
      this.expect(":");
      const of = this.union();
      if (this.peek().v === ";") this.next();
      this.expect("}");
      return { k: "map", of };
    }
    if (t.t !== "id") throw new Error(`${this.where}: unexpected ${JSON.stringify(t)}`);
    if (t.v === "Array") {
      this.expect("<");
      const of = this.union();
      this.expect(">");
      return { k: "array", of };
    }
    if (["string", "number", "boolean", "any", "unknown", "object", "null"].includes(t.v)) {
      return { k: "prim" };
    }
    if (this.peek() && this.peek().v === "[") {
      // IScale["kind"]: one of the interface's literal fields.
      this.next();
      this.next();
      this.expect("]");
      return { k: "prim" };
    }
    return { k: "ref", name: t.v };
  }
  // "name"?: T; ... up to the closing brace.
  properties() {
    const props = new Map();
    while (this.peek() && this.peek().v !== "}") {
      const name = this.next();
      if (name.t !== "str" && name.t !== "id") {
        throw new Error(`${this.where}: property name expected, got ${JSON.stringify(name)}`);
      }
      if (this.peek().v === "?") this.next();
      this.expect(":");
      props.set(name.v, this.union());
      this.expect(";");
    }
    return props;
  }
}

// A module specifier of an import, as the .d.ts file it names.
function resolveDts(fromFile, spec) {
  const base = spec.replace(/\.js$/, "");
  let file;
  if (spec.startsWith(".")) {
    file = path.resolve(path.dirname(fromFile), base);
  } else {
    const [pkg, rest] = splitSpecifier(base);
    file = path.join(packageDir(path.dirname(fromFile), pkg), rest);
  }
  return file + ".d.ts";
}

const files = new Map();

// One .d.ts file: its imports (local name -> [file, exported name]), interfaces (name ->
// property map), type aliases (name -> type) and exported aliases (exported -> local name).
function dtsFile(file) {
  if (files.has(file)) return files.get(file);
  if (!fs.existsSync(file)) throw new Error(`no type file ${file}`);
  const text = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  const f = { file, imports: new Map(), interfaces: new Map(), aliases: new Map(), exported: new Map() };
  for (const m of text.matchAll(/^import (?:type )?\{([^}]*)\} from "([^"]+)";/gm)) {
    for (const part of m[1].split(",").map((s) => s.trim()).filter(Boolean)) {
      const [orig, local] = part.split(/\s+as\s+/);
      f.imports.set(local || orig, [resolveDts(file, m[2]), orig]);
    }
  }
  for (const m of text.matchAll(/^export type \{([^}]*)\}/gm)) {
    for (const part of m[1].split(",").map((s) => s.trim()).filter(Boolean)) {
      const [local, exp] = part.split(/\s+as\s+/);
      f.exported.set(exp || local, local);
    }
  }
  for (const m of text.matchAll(/^export type (\w+) = ([^;]+);/gm)) {
    f.aliases.set(m[1], new TypeParser(m[2], `${file}: type ${m[1]}`).union());
  }
  for (const m of text.matchAll(/^export interface (\w+)(?: extends [^{]*)? \{/gm)) {
    const p = new TypeParser(text.slice(m.index + m[0].length), `${file}: interface ${m[1]}`);
    f.interfaces.set(m[1], p.properties());
  }
  files.set(file, f);
  return f;
}

// A named type as seen from a file: {props: Map} for an interface, {type} for an alias.
function resolveName(file, name) {
  const f = dtsFile(file);
  const local = f.exported.get(name) || name;
  if (f.interfaces.has(local)) return { file, name: local, props: f.interfaces.get(local) };
  if (f.aliases.has(local)) return { file, name: local, type: f.aliases.get(local) };
  if (f.imports.has(local)) {
    const [other, orig] = f.imports.get(local);
    return resolveName(other, orig);
  }
  throw new Error(`${file}: type ${name} not found`);
}

// Properties whose generated interface is empty although the value is a JSON schema (the
// generator cannot express "schema or bool" / "schema or array"): walk them as JSONSchemaProps.
const SCHEMA_OR = new Set(["IJSONSchemaPropsOrBool", "IJSONSchemaPropsOrArray"]);

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function childPath(p, key) {
  if (typeof key === "number") return `${p}[${key}]`;
  if (/^[A-Za-z_$][\w$-]*$/.test(key)) return p ? `${p}.${key}` : key;
  return `${p}[${JSON.stringify(key)}]`;
}

function walk(value, type, file, p, out) {
  if (value === null || value === undefined) return;
  switch (type.k) {
    case "prim":
      return;
    case "array":
      if (Array.isArray(value)) value.forEach((v, i) => walk(v, type.of, file, childPath(p, i), out));
      return;
    case "map":
      if (isObject(value)) {
        for (const [k, v] of Object.entries(value)) walk(v, type.of, file, childPath(p, k), out);
      }
      return;
    case "union": {
      const want = Array.isArray(value) ? "array" : isObject(value) ? "object" : "prim";
      for (const alt of type.alts) {
        if ((want === "array" && alt.k === "array") || (want === "object" && (alt.k === "map" || alt.k === "ref"))) {
          return walk(value, alt, file, p, out);
        }
      }
      return;
    }
    case "ref": {
      const r = resolveName(file, type.name);
      if (r.type) return walk(value, r.type, r.file, p, out);
      if (SCHEMA_OR.has(r.name)) {
        const props = { k: "ref", name: "IJSONSchemaProps" };
        const schemaFile = path.join(path.dirname(r.file), "JSONSchemaProps.d.ts");
        if (isObject(value)) walk(value, props, schemaFile, p, out);
        if (Array.isArray(value)) value.forEach((v, i) => walk(v, props, schemaFile, childPath(p, i), out));
        return;
      }
      // An empty interface is free-form JSON (FieldsV1, RawExtension, JSON).
      if (r.props.size === 0 || !isObject(value)) return;
      for (const [k, v] of Object.entries(value)) {
        const t = r.props.get(k);
        if (!t) out.push(childPath(p, k));
        else walk(v, t, r.file, childPath(p, k), out);
      }
      return;
    }
    default:
      throw new Error(`unknown type node ${JSON.stringify(type)}`);
  }
}

// ---- built-in kinds ------------------------------------------------------------------------

// kubernetes-models/<group>/<version>/<Kind>.js, or kubernetes-models/v1/<Kind>.js for core.
function kindBase(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^\w+$/.test(kind) ||
      !/^([a-z0-9.-]+\/)?v\w+$/.test(apiVersion)) {
    return null;
  }
  const base = path.join(KM, apiVersion, kind);
  return fs.existsSync(base + ".js") ? base : null;
}

function ajvMessage(e) {
  const params = e.params || {};
  const what =
    e.keyword === "required" ? `must have required property "${params.missingProperty}"`
    : e.keyword === "type" ? `must be ${params.type}`
    : e.keyword === "enum" ? `must be one of ${JSON.stringify(params.allowedValues)}`
    : e.message || `fails ${e.keyword} ${JSON.stringify(params)}`;
  return `${e.instancePath || "/"} ${what}`;
}

async function checkBuiltin(obj) {
  const base = kindBase(obj.apiVersion, obj.kind);
  if (!base) {
    return { errors: [`no upstream schema for apiVersion ${JSON.stringify(obj.apiVersion)} kind ${JSON.stringify(obj.kind)}`], unknown: [] };
  }
  const mod = await import(pathToFileURL(base + ".js").href);
  const cls = mod[obj.kind];
  const errors = [];
  try {
    // The prototype's validate on the object as it is: the constructor would fill in a missing
    // apiVersion and kind.
    cls.prototype.validate.call(obj);
  } catch (e) {
    if (Array.isArray(e.errors)) errors.push(...e.errors.map(ajvMessage));
    else errors.push(String(e && e.message ? e.message : e));
  }
  const unknown = [];
  walk(obj, { k: "ref", name: `I${obj.kind}` }, base + ".d.ts", "", unknown);
  if (obj.kind === "CustomResourceDefinition" && isObject(obj.spec) && Array.isArray(obj.spec.versions)) {
    obj.spec.versions.forEach((v, i) => {
      const s = v && v.schema && v.schema.openAPIV3Schema;
      const at = `/spec/versions/${i}/schema/openAPIV3Schema`;
      if (!isObject(s)) {
        errors.push(`${at} is missing: a v1 CRD version needs a structural schema`);
        return;
      }
      if (s.type !== "object") errors.push(`${at}/type must be "object" at the root`);
      structuralErrors(s, at, true, errors);
      try {
        newAjv().compile(toJsonSchema(s));
      } catch (e) {
        errors.push(`${at} does not compile: ${e.message}`);
      }
    });
  }
  return { errors, unknown };
}

// The rules of a structural schema the API server enforces on a v1 CRD
// (apiextensions-apiserver's structural schema validation) that ajv does not: every node has a
// type unless it is int-or-string or preserves unknown fields, properties and
// additionalProperties exclude each other, and the root's metadata restricts name and
// generateName only.
function structuralErrors(s, at, root, errors) {
  if (!isObject(s)) return;
  if (!s.type && !s["x-kubernetes-int-or-string"] && !s["x-kubernetes-preserve-unknown-fields"]) {
    errors.push(`${at} has no type`);
  }
  if (s.properties && s.additionalProperties !== undefined) {
    errors.push(`${at} has both properties and additionalProperties`);
  }
  for (const [k, sub] of Object.entries(s.properties || {})) {
    const subAt = `${at}/properties/${k}`;
    if (root && k === "metadata") {
      const extra = Object.keys(sub.properties || {}).filter((n) => n !== "name" && n !== "generateName");
      if (extra.length) errors.push(`${subAt} restricts ${extra.join(", ")}: only name and generateName may be`);
      if (sub.type !== "object") errors.push(`${subAt}/type must be "object"`);
      continue;
    }
    structuralErrors(sub, subAt, false, errors);
  }
  if (isObject(s.items)) structuralErrors(s.items, `${at}/items`, false, errors);
  if (isObject(s.additionalProperties)) {
    structuralErrors(s.additionalProperties, `${at}/additionalProperties`, false, errors);
  }
}

function newAjv() {
  const ajv = new Ajv({ strict: false, allErrors: true });
  addFormats(ajv);
  return ajv;
}

// ---- custom resources ----------------------------------------------------------------------

// The ajv (and ajv-formats) the built-in validators run: @kubernetes-models/validate's own
// dependencies, resolved from where that package is, so a CRD's schema is compiled by the same
// ajv version, whatever npm hoists, and no second pin of ajv has to follow the lock file's.
const VALIDATE = packageDir(KM, "@kubernetes-models/validate");
const require = createRequire(path.join(VALIDATE, "package.json"));
const Ajv = require("ajv").default;
const addFormats = require("ajv-formats").default;

// The CRD's version schema as a JSON schema ajv runs: OpenAPI's nullable becomes a null type,
// x-kubernetes-int-or-string an integer-or-string; the other x-kubernetes-* keywords (CEL rules,
// list types) are schema_test.py's, which runs the fake API server's CRD validation on them.
function toJsonSchema(s) {
  if (Array.isArray(s)) return s.map(toJsonSchema);
  if (!isObject(s)) return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith("x-kubernetes-") || k === "nullable" || k === "example" || k === "externalDocs") continue;
    if (k === "properties" || k === "patternProperties" || k === "definitions") {
      out[k] = Object.fromEntries(Object.entries(v).map(([n, sub]) => [n, toJsonSchema(sub)]));
    } else if (["items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"].includes(k)) {
      out[k] = toJsonSchema(v);
    } else {
      out[k] = v;
    }
  }
  if (s["x-kubernetes-int-or-string"]) {
    delete out.type;
    out.anyOf = [...(out.anyOf || []), { type: "integer" }, { type: "string" }];
  }
  if (s.nullable && typeof out.type === "string") out.type = [out.type, "null"];
  return out;
}

// Fields a structural schema prunes: anything not in properties, unless additionalProperties
// or x-kubernetes-preserve-unknown-fields keeps it. metadata at the root follows ObjectMeta.
function walkStructural(value, s, p, out) {
  if (value === null || value === undefined || !isObject(s)) return;
  if (Array.isArray(value)) {
    if (s.items) value.forEach((v, i) => walkStructural(v, s.items, childPath(p, i), out));
    return;
  }
  if (!isObject(value)) return;
  for (const [k, v] of Object.entries(value)) {
    const cp = childPath(p, k);
    if (s.properties && s.properties[k]) {
      walkStructural(v, s.properties[k], cp, out);
    } else if (isObject(s.additionalProperties)) {
      walkStructural(v, s.additionalProperties, cp, out);
    } else if (s.additionalProperties === true || s["x-kubernetes-preserve-unknown-fields"]) {
      continue;
    } else {
      out.push(cp);
    }
  }
}

async function checkCustom(obj, crd) {
  const errors = [];
  const unknown = [];
  const [group, version] = String(obj.apiVersion || "").split("/");
  if (crd.spec.group !== group || crd.spec.names.kind !== obj.kind) {
    errors.push(`/ apiVersion ${obj.apiVersion} kind ${obj.kind} is not ${crd.spec.group} ${crd.spec.names.kind}`);
    return { errors, unknown };
  }
  const v = crd.spec.versions.find((x) => x.name === version);
  if (!v || !v.served) {
    errors.push(`/apiVersion version ${version} is not served by the CRD`);
    return { errors, unknown };
  }
  const schema = v.schema.openAPIV3Schema;
  const fn = newAjv().compile(toJsonSchema(schema));
  if (!fn(obj)) errors.push(...fn.errors.map(ajvMessage));
  // metadata is ObjectMeta whatever the CRD says of it (a CRD may only restrict name and
  // generateName, which the ajv run above checks).
  const { metadata, ...rest } = obj;
  const meta = await import(pathToFileURL(path.join(APIMACHINERY, "apis/meta/v1/ObjectMeta.js")).href);
  if (metadata !== undefined) {
    try {
      meta.ObjectMeta.prototype.validate.call(metadata);
    } catch (e) {
      errors.push(...(e.errors || [{ instancePath: "", message: String(e) }]).map((x) => ajvMessage({ ...x, instancePath: `/metadata${x.instancePath}` })));
    }
    walk(metadata, { k: "ref", name: "IObjectMeta" },
         path.join(APIMACHINERY, "apis/meta/v1/ObjectMeta.d.ts"), "metadata", unknown);
  }
  const { metadata: _m, ...schemaRest } = schema.properties || {};
  walkStructural(rest, { ...schema, properties: { ...schemaRest, apiVersion: {}, kind: {} } }, "", unknown);
  return { errors, unknown };
}

// ---- main ----------------------------------------------------------------------------------

const items = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const results = [];
for (const item of items) {
  const obj = item.object;
  let r;
  try {
    if (!isObject(obj)) r = { errors: ["/ must be object"], unknown: [] };
    else if (item.crd) r = await checkCustom(obj, item.crd);
    else r = await checkBuiltin(obj);
  } catch (e) {
    r = { errors: [`validator failed: ${e.stack || e}`], unknown: [] };
  }
  results.push({ name: item.name, kind: isObject(obj) ? `${obj.apiVersion} ${obj.kind}` : "?", ...r });
}
process.stdout.write(JSON.stringify(results) + "\n");
