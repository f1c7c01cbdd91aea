package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// A request's walk is read top to bottom (ARCHITECTURE.md, "CreateVolume,
// step by step"): its handler's file plans the request and dispatches to
// one executor of each kind, each in a file named for it, and what the
// executors share lies below them. These tests hold that shape: a use of
// a function from one file of a walk to another (a call, a method value, a
// function handed on as a callback) goes only down its layers, never back
// up or across to another executor, and the dispatch names one executor a
// kind. Put a pull's step back into create.go, or let the copy call the
// clone, and they fail.

// requestWalk is one request's files in layers, the handler's first.
type requestWalk struct {
	dir      string
	handler  string   // the file of the handler, the plan and the dispatch
	dispatch string   // the function of handler whose switch dispatches
	kinds    []string // the executors the dispatch names, as "file:function"
	// shared are files of the handler's own layer it may call besides the
	// executors (the jobs an earlier call left running).
	shared []string
	layers [][]string // below the handler, in the order a reader enters them
}

var requestWalks = []requestWalk{
	{
		dir: "controller", handler: "create.go", dispatch: "create",
		kinds: []string{"create_empty.go:createEmpty", "create_clone.go:createClone", "create_copy.go:createCopy",
			"create_pull.go:createPulled"},
		shared: []string{"create_jobs.go"},
		layers: [][]string{
			{"create_empty.go", "create_clone.go", "create_copy.go", "create_pull.go"},
			{"create_pull_rounds.go"},
			{"create_pull_receive.go"},
			{"create_checks.go"},
			{"create_name.go", "create_properties.go", "source.go", "create_jobs.go"},
		},
	},
	{
		dir: "node", handler: "stage.go", dispatch: "NodeStageVolume",
		kinds:  []string{"stage_dataset.go:stageDataset", "stage_formatted.go:stageFormatted", "stage_block.go:stageBlock"},
		layers: [][]string{{"stage_dataset.go", "stage_formatted.go", "stage_block.go"}},
	},
}

// packageUses parses a package's non-test files: which files declare each
// function or method name, and the names each file uses. A use is any
// identifier other than a declaration's own name: a call, and also a method
// value or a function handed on as a callback, which take the reader to the
// other file just the same.
func packageUses(t *testing.T, dir string) (declaredIn map[string][]string, uses map[string][]string, files map[string]*ast.File) {
	t.Helper()
	declaredIn, uses, files = map[string][]string{}, map[string][]string{}, map[string]*ast.File{}
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		files[name] = file
		declared := map[*ast.Ident]bool{}
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok {
				declaredIn[fn.Name.Name] = append(declaredIn[fn.Name.Name], name)
				declared[fn.Name] = true
			}
		}
		ast.Inspect(file, func(node ast.Node) bool {
			if ident, ok := node.(*ast.Ident); ok && !declared[ident] {
				uses[name] = append(uses[name], ident.Name)
			}
			return true
		})
	}
	return declaredIn, uses, files
}

// calledName is the function or method name a call names, "" for others.
func calledName(call *ast.CallExpr) string {
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		return fun.Name
	case *ast.SelectorExpr:
		return fun.Sel.Name
	}
	return ""
}

func TestRequestWalksGoDownTheirLayers(t *testing.T) {
	for _, walk := range requestWalks {
		for _, finding := range layerFindings(t, walk) {
			t.Error(finding)
		}
	}
}

func TestHandlersDispatchToOneExecutorAKind(t *testing.T) {
	for _, walk := range requestWalks {
		for _, finding := range dispatchFindings(t, walk) {
			t.Error(finding)
		}
	}
}

// layerFindings are the uses from one file of the walk of a function
// declared in a file of the same layer or above.
func layerFindings(t *testing.T, walk requestWalk) []string {
	declaredIn, uses, files := packageUses(t, walk.dir)
	layerOf := map[string]int{walk.handler: 0}
	var findings []string
	for i, layer := range walk.layers {
		for _, file := range layer {
			if files[file] == nil {
				findings = append(findings, fmt.Sprintf("%s/%s, a file of the walk from %s, does not exist", walk.dir, file, walk.handler))
			}
			layerOf[file] = i + 1
		}
	}
	for caller, callerLayer := range layerOf {
		for _, name := range uses[caller] {
			for _, callee := range declaredIn[name] {
				calleeLayer, inWalk := layerOf[callee]
				if !inWalk || callee == caller || calleeLayer > callerLayer {
					continue
				}
				findings = append(findings, fmt.Sprintf("%s/%s uses %s of %s: a walk's files call only down their layers, never back up or across", walk.dir, caller, name, callee))
			}
		}
	}
	return findings
}

// dispatchFindings are what keeps the handler's dispatch from naming one
// executor a kind, and each use from the handler's file of a function
// below it other than an executor or a shared file's.
func dispatchFindings(t *testing.T, walk requestWalk) []string {
	declaredIn, uses, files := packageUses(t, walk.dir)
	var findings []string
	want := map[string]string{} // executor → its file
	for _, kind := range walk.kinds {
		file, function, _ := strings.Cut(kind, ":")
		want[function] = file
		if !slices.Contains(declaredIn[function], file) {
			findings = append(findings, fmt.Sprintf("%s/%s does not declare the executor %s", walk.dir, file, function))
		}
	}
	var got []string
	for _, name := range dispatchedCalls(t, files[walk.handler], walk.dispatch) {
		if _, executor := want[name]; executor {
			got = append(got, name)
		}
	}
	sort.Strings(got)
	names := slices.Sorted(maps.Keys(want))
	if !slices.Equal(got, names) {
		findings = append(findings, fmt.Sprintf("%s/%s's %s dispatches to %v, want one executor a kind: %v", walk.dir, walk.handler, walk.dispatch, got, names))
	}
	// Every other use from the handler's file of the walk's functions is
	// a step taken out of its executor.
	below := map[string]bool{}
	for _, layer := range walk.layers {
		for _, file := range layer {
			below[file] = !slices.Contains(walk.shared, file)
		}
	}
	for _, name := range uses[walk.handler] {
		if _, executor := want[name]; executor {
			continue
		}
		for _, callee := range declaredIn[name] {
			if below[callee] {
				findings = append(findings, fmt.Sprintf("%s/%s uses %s of %s: the handler's file plans and dispatches, the executor takes its steps", walk.dir, walk.handler, name, callee))
			}
		}
	}
	return findings
}

// dispatchedCalls are the names called in the case clauses of the switch
// statements of function.
func dispatchedCalls(t *testing.T, file *ast.File, function string) []string {
	t.Helper()
	if file == nil {
		t.Fatalf("no file declares %s", function)
	}
	var names []string
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != function {
			continue
		}
		ast.Inspect(fn.Body, func(node ast.Node) bool {
			if clause, ok := node.(*ast.CaseClause); ok {
				for _, statement := range clause.Body {
					ast.Inspect(statement, func(node ast.Node) bool {
						if call, ok := node.(*ast.CallExpr); ok {
							names = append(names, calledName(call))
						}
						return true
					})
				}
			}
			return true
		})
		return names
	}
	t.Fatalf("%s declares no function %s", file.Name.Name, function)
	return nil
}

// The walk's files exist, so that ARCHITECTURE.md's walk names real ones.
func TestARCHITECTUREWalksNameTheWalkFiles(t *testing.T) {
	text, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, walk := range requestWalks {
		for _, layer := range append([][]string{{walk.handler}}, walk.layers...) {
			for _, file := range layer {
				if !strings.Contains(string(text), "`"+walk.dir+"/"+file+"`") {
					t.Errorf("ARCHITECTURE.md's walks do not name `%s/%s`", walk.dir, file)
				}
			}
		}
	}
}

// The two walk checks on a planted package: a handler h.go dispatching to
// the executors a.go and b.go, with low.go below them. A use is caught
// whether it is a call, a method value or a function handed on.
func TestTheWalkChecksCatchEveryKindOfUse(t *testing.T) {
	clean := map[string]string{
		"h.go":   "package p\nfunc create(k int) {\n\tswitch k {\n\tcase 0:\n\t\ta()\n\tdefault:\n\t\tb()\n\t}\n}\n",
		"a.go":   "package p\nfunc a() { step() }\n",
		"b.go":   "package p\nfunc b() { run(step) }\n",
		"low.go": "package p\nfunc step() {}\nfunc run(f func()) { f() }\n",
	}
	for _, c := range []struct {
		name, file, source string
		layer, dispatch    int
	}{
		{"the clean package passes", "", "", 0, 0},
		{"the handler calling a step", "h.go", "package p\nfunc create(k int) {\n\tstep()\n\tswitch k {\n\tcase 0:\n\t\ta()\n\tdefault:\n\t\tb()\n\t}\n}\n", 0, 1},
		{"the handler taking a step as a value", "h.go", "package p\nfunc create(k int) {\n\tf := step\n\tswitch k {\n\tcase 0:\n\t\ta()\n\tdefault:\n\t\tb()\n\t}\n\tf()\n}\n", 0, 1},
		{"the handler dispatching to one executor", "h.go", "package p\nfunc create(k int) {\n\tswitch k {\n\tdefault:\n\t\ta()\n\t}\n}\n", 0, 1},
		{"an executor calling across", "a.go", "package p\nfunc a() { b() }\n", 1, 0},
		{"an executor handing another on", "a.go", "package p\nfunc a() { run(b) }\n", 1, 0},
		{"a shared step calling back up", "low.go", "package p\nfunc step() { a() }\nfunc run(f func()) { f() }\n", 1, 0},
		{"a method value of the executor above", "low.go", "package p\ntype s struct{}\nfunc step() { _ = s{}.a }\nfunc run(f func()) { f() }\n", 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for file, source := range clean {
				if file == c.file {
					source = c.source
				}
				if err := os.WriteFile(filepath.Join(dir, file), []byte(source), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			walk := requestWalk{dir: dir, handler: "h.go", dispatch: "create", kinds: []string{"a.go:a", "b.go:b"},
				layers: [][]string{{"a.go", "b.go"}, {"low.go"}}}
			if got := layerFindings(t, walk); len(got) != c.layer {
				t.Errorf("layer findings %q, want %d", got, c.layer)
			}
			if got := dispatchFindings(t, walk); len(got) != c.dispatch {
				t.Errorf("dispatch findings %q, want %d", got, c.dispatch)
			}
		})
	}
}
