package apidump

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// skipDirs are never part of the public surface.
var skipDirs = map[string]bool{"internal": true, "cmd": true, "testdata": true, "bench": true, "api": true}

// Module returns the API lines of every public package below root (a module
// root): directories holding non-test Go files, outside internal/, cmd/,
// testdata/, bench/ and nested modules. Lines are sorted.
func Module(root string) ([]string, error) {
	var lines []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != root {
			name := d.Name()
			if skipDirs[name] || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		rel, _ := filepath.Rel(root, path)
		pkgLines, err := Dir(path, filepath.ToSlash(rel))
		lines = append(lines, pkgLines...)
		return err
	})
	slices.Sort(lines)
	return slices.Compact(lines), err
}

// Dir returns the API lines of the package in dir (rel is its path in the
// module, "." for the root); nil when dir holds no importable package.
func Dir(dir, rel string) ([]string, error) {
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil, nil
		}
		return nil, err
	}
	if bp.Name == "main" {
		return nil, nil
	}
	fset := token.NewFileSet()
	d := &dumper{fset: fset, prefix: "pkg " + pkgLabel(bp.Name, rel) + ", "}
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		d.file(f)
	}
	return d.lines, nil
}

// pkgLabel names a package by its path in the module (dialect/postgres), or by
// its name for the root.
func pkgLabel(name, rel string) string {
	if rel == "." {
		return name
	}
	return rel
}

type dumper struct {
	fset   *token.FileSet
	prefix string
	lines  []string
}

func (d *dumper) add(format string, args ...any) {
	d.lines = append(d.lines, d.prefix+fmt.Sprintf(format, args...))
}

func (d *dumper) file(f *ast.File) {
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			d.funcDecl(decl)
		case *ast.GenDecl:
			d.genDecl(decl)
		}
	}
}

func (d *dumper) funcDecl(fn *ast.FuncDecl) {
	if !fn.Name.IsExported() {
		return
	}
	sig := d.signature(fn.Type)
	if fn.Recv == nil {
		d.add("func %s%s", fn.Name.Name, sig)
		return
	}
	recv := d.expr(fn.Recv.List[0].Type)
	if !ast.IsExported(strings.TrimLeft(baseTypeName(recv), "*")) {
		return
	}
	d.add("method (%s) %s%s", recv, fn.Name.Name, sig)
}

// baseTypeName strips type parameters from a receiver: (*Set[T]) -> *Set.
func baseTypeName(recv string) string {
	name, _, _ := strings.Cut(recv, "[")
	return name
}

func (d *dumper) genDecl(g *ast.GenDecl) {
	for _, spec := range g.Specs {
		switch spec := spec.(type) {
		case *ast.TypeSpec:
			d.typeSpec(spec)
		case *ast.ValueSpec:
			d.valueSpec(g.Tok, spec)
		}
	}
}

func (d *dumper) valueSpec(tok token.Token, v *ast.ValueSpec) {
	for i, name := range v.Names {
		if !name.IsExported() {
			continue
		}
		switch {
		case v.Type != nil:
			d.add("%s %s %s", tok, name.Name, d.expr(v.Type))
		case i < len(v.Values):
			d.add("%s %s = %s", tok, name.Name, d.expr(v.Values[i]))
		default: // iota continuation: the name is the API.
			d.add("%s %s", tok, name.Name)
		}
	}
}

func (d *dumper) typeSpec(t *ast.TypeSpec) {
	if !t.Name.IsExported() {
		return
	}
	name := t.Name.Name
	if t.Assign.IsValid() {
		d.add("type %s = %s", name, d.expr(t.Type))
		return
	}
	switch typ := t.Type.(type) {
	case *ast.StructType:
		d.add("type %s struct", name)
		d.fields(name, "struct", typ.Fields)
	case *ast.InterfaceType:
		d.add("type %s interface { %s }", name, strings.Join(d.methodNames(typ), ", "))
		d.fields(name, "interface", typ.Methods)
	default:
		d.add("type %s %s", name, d.expr(t.Type))
	}
}

func (d *dumper) methodNames(it *ast.InterfaceType) []string {
	var names []string
	for _, m := range it.Methods.List {
		for _, n := range m.Names {
			if n.IsExported() {
				names = append(names, n.Name)
			}
		}
		if len(m.Names) == 0 {
			names = append(names, d.expr(m.Type))
		}
	}
	slices.Sort(names)
	return names
}

// fields lists a struct's exported fields (and embedded types) or an
// interface's methods, one line each.
func (d *dumper) fields(typeName, kind string, list *ast.FieldList) {
	for _, f := range list.List {
		if len(f.Names) == 0 {
			if ast.IsExported(strings.TrimLeft(d.expr(f.Type), "*")) || kind == "interface" {
				d.add("type %s %s, embedded %s", typeName, kind, d.expr(f.Type))
			}
			continue
		}
		for _, n := range f.Names {
			if !n.IsExported() {
				continue
			}
			if ft, ok := f.Type.(*ast.FuncType); ok && kind == "interface" {
				d.add("type %s interface, %s%s", typeName, n.Name, d.signature(ft))
				continue
			}
			d.add("type %s %s, %s %s", typeName, kind, n.Name, d.expr(f.Type))
		}
	}
}

// signature prints a function type without the func keyword or parameter names.
func (d *dumper) signature(ft *ast.FuncType) string {
	s := "(" + d.params(ft.Params) + ")"
	if ft.Results == nil || len(ft.Results.List) == 0 {
		return s
	}
	res := d.params(ft.Results)
	if len(ft.Results.List) == 1 && len(ft.Results.List[0].Names) <= 1 {
		return s + " " + res
	}
	return s + " (" + res + ")"
}

func (d *dumper) params(fl *ast.FieldList) string {
	if fl == nil {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		typ := d.expr(f.Type)
		for range max(1, len(f.Names)) {
			parts = append(parts, typ)
		}
	}
	return strings.Join(parts, ", ")
}

// expr prints an expression on one line, with struct and interface literals
// folded to one line too.
func (d *dumper) expr(e ast.Expr) string {
	var buf bytes.Buffer
	_ = printer.Fprint(&buf, d.fset, e)
	return strings.Join(strings.Fields(buf.String()), " ")
}
