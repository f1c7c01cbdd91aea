package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// archSymbol is a symbol ARCHITECTURE.md names in backquotes: a package of
// the module, then a declaration of it, and maybe a field or method.
var archSymbol = regexp.MustCompile("`([a-z]+)\\.([A-Za-z_][A-Za-z0-9_]*)(?:\\.([A-Za-z_][A-Za-z0-9_]*))?")

// modulePackages are the module's packages by the name ARCHITECTURE.md
// calls them.
var modulePackages = map[string]string{
	"controller": "controller", "node": "node", "peer": "peer", "zfs": "zfs",
	"rules": "rules", "rpc": "rpc", "forward": "forward", "wiring": "wiring", "kubelet": "rpc/kubelet",
	"inventory": "inventory", "metrics": "metrics", "snapmeta": "snapmeta", "zfstest": "zfs/zfstest",
	"nodetest": "node/nodetest", "wiringtest": "wiring/wiringtest",
}

// declared lists what a package's Go files declare at the top level, and
// the methods and struct fields of its types as "Type.Name".
func declared(t *testing.T, dir string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					names[decl.Name.Name] = true
					continue
				}
				receiver := decl.Recv.List[0].Type
				if star, ok := receiver.(*ast.StarExpr); ok {
					receiver = star.X
				}
				if ident, ok := receiver.(*ast.Ident); ok {
					names[ident.Name+"."+decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						names[spec.Name.Name] = true
						if fields, ok := spec.Type.(*ast.StructType); ok {
							for _, field := range fields.Fields.List {
								for _, name := range field.Names {
									names[spec.Name.Name+"."+name.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, name := range spec.Names {
							names[name.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}

func TestEverySymbolARCHITECTURENamesExists(t *testing.T) {
	text, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	packages := map[string]map[string]bool{}
	for _, match := range archSymbol.FindAllStringSubmatch(string(text), -1) {
		dir, ours := modulePackages[match[1]]
		if !ours {
			continue // a file name (params.go) or another module's symbol
		}
		if packages[dir] == nil {
			packages[dir] = declared(t, dir)
		}
		name := match[2]
		if match[3] != "" && packages[dir][name+"."+match[3]] {
			name += "." + match[3]
		}
		if !packages[dir][name] && !declaresMethod(packages[dir], name) {
			t.Errorf("ARCHITECTURE.md names %s, which package %s does not declare", strings.Trim(match[0], "`"), dir)
		}
	}
}

// declaresMethod reports whether some type of the package has a method or
// field of that name (ARCHITECTURE.md names wiring.ConnectPeers for the
// method of wiring.Plugin).
func declaresMethod(names map[string]bool, name string) bool {
	for declared := range names {
		if _, member, ok := strings.Cut(declared, "."); ok && member == name {
			return true
		}
	}
	return false
}

// issueCitation is a comment that cites the tracker, which is not part of
// the repository: a reader of the code cannot follow it.
var issueCitation = regexp.MustCompile(`(?i)(//|#|--|/\*).*\bissues? \d+`)

func TestNoCodeCommentCitesAnIssueNumber(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, entry os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if entry.IsDir() {
			if name := entry.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "out" || name == "dist" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".sh", ".lua", ".yaml", ".hcl", ".tpl":
		default:
			if entry.Name() != "Makefile" {
				return nil
			}
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(text), "\n") {
			if issueCitation.MatchString(line) && !strings.Contains(line, "issueCitation") {
				t.Errorf("%s:%d cites the tracker: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
