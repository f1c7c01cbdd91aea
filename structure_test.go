package main

import (
	"fmt"
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
// method of wiring.Services).
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
	walkSources(t, func(path string, text []byte) {
		switch filepath.Ext(path) {
		case ".go", ".sh", ".lua", ".yaml", ".hcl", ".tpl":
		default:
			if filepath.Base(path) != "Makefile" {
				return
			}
		}
		for i, line := range strings.Split(string(text), "\n") {
			if issueCitation.MatchString(line) && !strings.Contains(line, "issueCitation") {
				t.Errorf("%s:%d cites the tracker: %s", path, i+1, strings.TrimSpace(line))
			}
		}
	})
}

// walkSources calls read with every file of the repository, whichever Go
// module holds it (e2e and packaging/checks are modules of their own), but
// not build output, hidden directories or test fixtures.
func walkSources(t *testing.T, read func(path string, text []byte)) {
	t.Helper()
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
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		read(path, text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A file or function past these lengths no longer reads on a screen or two;
// one that must be longer says why in a comment, which a reviewer can then
// weigh: `// long file: <reason>` before the package clause, `// long:
// <reason>` in the doc comment of a function.
const (
	maxFileLines = 600
	maxFuncLines = 80
	// minReasonWords keeps "// long: long" from passing for a reason.
	minReasonWords = 3
)

// longCode lists what in one Go file is longer than the limits without a
// reason: the file itself and each function, counted from its func keyword
// to its closing brace.
func longCode(path string, source []byte) ([]string, error) {
	fileSet := token.NewFileSet()
	file, err := parser.ParseFile(fileSet, path, source, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var findings []string
	if lines := fileSet.File(file.Pos()).LineCount(); lines > maxFileLines && !fileSaysWhyLong(file) {
		findings = append(findings, fmt.Sprintf("%s: %d lines (over %d) and no `// long file: <reason>` above the package clause", path, lines, maxFileLines))
	}
	for _, decl := range file.Decls {
		function, ok := decl.(*ast.FuncDecl)
		if !ok || function.Body == nil {
			continue
		}
		start := fileSet.Position(function.Type.Func)
		lines := fileSet.Position(function.Body.Rbrace).Line - start.Line + 1
		if lines > maxFuncLines && !hasReason(function.Doc, "long:") {
			findings = append(findings, fmt.Sprintf("%s:%d: func %s is %d lines (over %d) and its doc comment has no `// long: <reason>`", path, start.Line, function.Name.Name, lines, maxFuncLines))
		}
	}
	return findings, nil
}

// fileSaysWhyLong looks for the file's reason among the comments above its
// package clause.
func fileSaysWhyLong(file *ast.File) bool {
	for _, group := range file.Comments {
		if group.Pos() < file.Package && hasReason(group, "long file:") {
			return true
		}
	}
	return false
}

// hasReason reports whether a line of the comment is the marker followed by
// a reason of a few words.
func hasReason(group *ast.CommentGroup, marker string) bool {
	if group == nil {
		return false
	}
	for _, comment := range group.List {
		text := strings.TrimSpace(strings.TrimPrefix(comment.Text, "//"))
		if reason, ok := strings.CutPrefix(text, marker); ok && len(strings.Fields(reason)) >= minReasonWords {
			return true
		}
	}
	return false
}

func TestNoGoFileOrFunctionIsLongWithoutAReason(t *testing.T) {
	walkSources(t, func(path string, text []byte) {
		if filepath.Ext(path) != ".go" {
			return
		}
		findings, err := longCode(path, text)
		if err != nil {
			t.Fatal(err)
		}
		for _, finding := range findings {
			t.Error(finding)
		}
	})
}

func TestLongCodeIsFoundUnlessItSaysWhy(t *testing.T) {
	// body is a function of the given length in lines, func to brace.
	body := func(name string, lines int) string {
		return "func " + name + "() {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	// padded is a file of exactly the given length in lines.
	padded := func(header string, lines int) string {
		text := header + "package p\n"
		return text + strings.Repeat("// filler\n", lines-strings.Count(text, "\n"))
	}
	for _, c := range []struct {
		name, source string
		findings     int
	}{
		{"an 80-line function passes", "package p\n" + body("f", 80), 0},
		{"an 81-line function fails", "package p\n" + body("f", 81), 1},
		{"an 81-line function with a reason passes", "package p\n// f is a table.\n//\n// long: one case a row of the table\n" + body("f", 81), 0},
		{"a reason of one word does not count", "package p\n// long: long\n" + body("f", 81), 1},
		{"a reason away from the function does not count", "package p\n// long: one case a row\n\nvar x = 0\n\n" + body("f", 81), 1},
		{"a 600-line file passes", padded("", 600), 0},
		{"a 601-line file fails", padded("", 601), 1},
		{"a 601-line file with a reason passes", padded("// long file: generated from the table of errors\n", 601), 0},
		{"a file's reason below its package clause does not count", padded("", 600) + "// long file: generated from the table\n", 1},
		{"a function's reason does not excuse its file", padded("// long: one case a row\n", 601), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			findings, err := longCode("planted.go", []byte(c.source))
			if err != nil {
				t.Fatal(err)
			}
			if len(findings) != c.findings {
				t.Errorf("%d findings, want %d: %q", len(findings), c.findings, findings)
			}
		})
	}
}
