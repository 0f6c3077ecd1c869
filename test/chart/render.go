// render: renders a Helm chart the way `helm template` does, for the features charts/topodra
// uses, without a helm binary: Go text/template + sprig (Debian golang-github-masterminds-sprig-dev)
// + helm's own functions (include, tpl, required, toYaml, fromYaml, toJson, fromJson) on
// yaml.v3 (golang-gopkg-yaml.v3-dev). GOPATH mode, offline:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go run render.go -chart DIR [-f VALUES.yaml]... [-set a.b=v]...
//
// Output is one JSON object on stdout (read by chart_test.py):
//
//	{"values": merged values, "chart": Chart.yaml,
//	 "documents": [{"source": "templates/x.yaml", "text": "...", "object": {...}}],
//	 "notes": "rendered NOTES.txt", "valueRefs": ["a.b", ...]}
//
// Every rendered document must parse as one YAML mapping (else exit 1 naming the template and
// the error). -strict (default on) makes a missing map key an error, like `helm lint --strict`.
// valueRefs are the .Values paths the templates reference, taken from the parse trees
// (.Values.a.b, $.Values.a.b), not by text search.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func die(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "render: "+format+"\n", args...)
	os.Exit(1)
}

// normalize turns yaml.v3's decoded values into JSON-compatible ones (map[string]interface{}).
func normalize(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, x := range t {
			t[k] = normalize(x)
		}
		return t
	case map[interface{}]interface{}:
		m := map[string]interface{}{}
		for k, x := range t {
			m[fmt.Sprint(k)] = normalize(x)
		}
		return m
	case []interface{}:
		for i, x := range t {
			t[i] = normalize(x)
		}
		return t
	}
	return v
}

func readYAML(path string) map[string]interface{} {
	data, err := os.ReadFile(path)
	if err != nil {
		die("%v", err)
	}
	var m map[string]interface{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		die("%s: %v", path, err)
	}
	if m == nil {
		m = map[string]interface{}{}
	}
	return normalize(m).(map[string]interface{})
}

// coalesce merges src into dst like helm: maps merge recursively, anything else replaces;
// a null in src deletes the key.
func coalesce(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				coalesce(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// setValue applies one --set a.b.c=v (helm's scalar typing: int, bool, null, else string).
func setValue(values map[string]interface{}, expr string) {
	eq := strings.Index(expr, "=")
	if eq < 0 {
		die("-set %q: want key=value", expr)
	}
	keys := strings.Split(expr[:eq], ".")
	raw := expr[eq+1:]
	var val interface{} = raw
	if i, err := strconv.ParseInt(raw, 10, 64); err == nil {
		val = i
	} else if raw == "true" || raw == "false" {
		val = raw == "true"
	} else if raw == "null" {
		val = nil
	}
	m := values
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = val
}

// toYAML is helm's toYaml: 2-space indent, no trailing newline, "" on error.
func toYAML(v interface{}) string {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	enc.Close()
	return strings.TrimSuffix(buf.String(), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return normalize(m).(map[string]interface{})
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

// collectRefs walks a parse tree and records every field chain rooted at .Values or $.Values.
func collectRefs(n parse.Node, refs map[string]bool) {
	if n == nil {
		return
	}
	add := func(idents []string) {
		if len(idents) > 1 && idents[0] == "Values" {
			refs[strings.Join(idents[1:], ".")] = true
		}
	}
	switch t := n.(type) {
	case *parse.ListNode:
		if t == nil {
			return
		}
		for _, c := range t.Nodes {
			collectRefs(c, refs)
		}
	case *parse.ActionNode:
		collectRefs(t.Pipe, refs)
	case *parse.PipeNode:
		if t == nil {
			return
		}
		for _, c := range t.Cmds {
			collectRefs(c, refs)
		}
	case *parse.CommandNode:
		for _, a := range t.Args {
			collectRefs(a, refs)
		}
	case *parse.FieldNode:
		add(t.Ident)
	case *parse.VariableNode:
		if len(t.Ident) > 0 && t.Ident[0] == "$" {
			add(t.Ident[1:])
		}
	case *parse.ChainNode:
		collectRefs(t.Node, refs)
	case *parse.IfNode:
		collectRefs(t.Pipe, refs)
		collectRefs(t.List, refs)
		collectRefs(t.ElseList, refs)
	case *parse.RangeNode:
		collectRefs(t.Pipe, refs)
		collectRefs(t.List, refs)
		collectRefs(t.ElseList, refs)
	case *parse.WithNode:
		collectRefs(t.Pipe, refs)
		collectRefs(t.List, refs)
		collectRefs(t.ElseList, refs)
	case *parse.TemplateNode:
		collectRefs(t.Pipe, refs)
	}
}

type document struct {
	Source string      `json:"source"`
	Text   string      `json:"text"`
	Object interface{} `json:"object"`
}

func main() {
	chartDir := flag.String("chart", "", "chart directory")
	strict := flag.Bool("strict", true, "a missing map key is an error")
	releaseName := flag.String("name", "topodra", "release name")
	namespace := flag.String("namespace", "kube-system", "release namespace")
	var valueFiles, sets listFlag
	flag.Var(&valueFiles, "f", "values file (repeatable)")
	flag.Var(&sets, "set", "key=value (repeatable)")
	flag.Parse()
	if *chartDir == "" {
		die("-chart is required")
	}

	chartMeta := readYAML(filepath.Join(*chartDir, "Chart.yaml"))
	values := readYAML(filepath.Join(*chartDir, "values.yaml"))
	for _, f := range valueFiles {
		coalesce(values, readYAML(f))
	}
	for _, s := range sets {
		setValue(values, s)
	}

	str := func(k string) string { s, _ := chartMeta[k].(string); return s }
	top := map[string]interface{}{
		"Values": values,
		"Release": map[string]interface{}{
			"Name": *releaseName, "Namespace": *namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Chart": map[string]interface{}{
			"Name": str("name"), "Version": str("version"), "AppVersion": str("appVersion"),
			"Description": str("description"), "Type": str("type"),
		},
		"Capabilities": map[string]interface{}{},
	}

	root := template.New("gotpl")
	if *strict {
		root.Option("missingkey=error")
	} else {
		root.Option("missingkey=zero")
	}
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["toJson"] = toJSON
	funcs["fromJson"] = fromJSON
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, fmt.Errorf("%s", msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := root.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = t.Execute(&buf, data)
		return buf.String(), err
	}
	root.Funcs(funcs)

	// Parse every template file into one set (so defines are shared), like helm.
	tdir := filepath.Join(*chartDir, "templates")
	var files []string
	err := filepath.Walk(tdir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		die("%v", err)
	}
	sort.Strings(files)
	refs := map[string]bool{}
	for _, p := range files {
		rel, _ := filepath.Rel(*chartDir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			die("%v", err)
		}
		t, err := root.New(rel).Parse(string(data))
		if err != nil {
			die("parse %s: %v", rel, err)
		}
		_ = t
	}
	for _, t := range root.Templates() {
		if t.Tree != nil {
			collectRefs(t.Tree.Root, refs)
		}
	}

	out := map[string]interface{}{"values": values, "chart": chartMeta}
	var docs []document
	for _, p := range files {
		rel, _ := filepath.Rel(*chartDir, p)
		base := filepath.Base(p)
		if strings.HasPrefix(base, "_") {
			continue // partials
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, rel, top); err != nil {
			die("render %s: %v", rel, err)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if base == "NOTES.txt" {
			out["notes"] = text
			continue
		}
		if !strings.HasSuffix(base, ".yaml") && !strings.HasSuffix(base, ".yml") {
			continue
		}
		for i, part := range strings.Split("\n"+text, "\n---") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			var obj map[string]interface{}
			dec := yaml.NewDecoder(strings.NewReader(part))
			dec.KnownFields(true)
			if err := dec.Decode(&obj); err != nil {
				die("%s (document %d) is not valid YAML: %v\n%s", rel, i, err, part)
			}
			if obj == nil {
				continue // only comments
			}
			docs = append(docs, document{Source: rel, Text: part, Object: normalize(obj)})
		}
	}
	out["documents"] = docs
	var refList []string
	for r := range refs {
		refList = append(refList, r)
	}
	sort.Strings(refList)
	out["valueRefs"] = refList
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		die("%v", err)
	}
}
