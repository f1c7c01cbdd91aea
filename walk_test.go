package main

import (
	"go/ast"
	"go/parser"
	"go/token"
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
// executors share lies below them. These tests hold that shape: a call
// from one file of a walk to another goes only down its layers, never back
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

// packageCalls parses a package's non-test files: which files declare each
// function or method name, and the names each file calls.
func packageCalls(t *testing.T, dir string) (declaredIn map[string][]string, calls map[string][]*ast.CallExpr, files map[string]*ast.File) {
	t.Helper()
	declaredIn, calls, files = map[string][]string{}, map[string][]*ast.CallExpr{}, map[string]*ast.File{}
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
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok {
				declaredIn[fn.Name.Name] = append(declaredIn[fn.Name.Name], name)
			}
		}
		ast.Inspect(file, func(node ast.Node) bool {
			if call, ok := node.(*ast.CallExpr); ok {
				calls[name] = append(calls[name], call)
			}
			return true
		})
	}
	return declaredIn, calls, files
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
		declaredIn, calls, files := packageCalls(t, walk.dir)
		layerOf := map[string]int{walk.handler: 0}
		for i, layer := range walk.layers {
			for _, file := range layer {
				if files[file] == nil {
					t.Errorf("%s/%s, a file of the walk from %s, does not exist", walk.dir, file, walk.handler)
				}
				layerOf[file] = i + 1
			}
		}
		for caller, callerLayer := range layerOf {
			for _, call := range calls[caller] {
				name := calledName(call)
				for _, callee := range declaredIn[name] {
					calleeLayer, inWalk := layerOf[callee]
					if !inWalk || callee == caller || calleeLayer > callerLayer {
						continue
					}
					t.Errorf("%s/%s calls %s of %s: a walk's files call only down their layers, never back up or across", walk.dir, caller, name, callee)
				}
			}
		}
	}
}

func TestHandlersDispatchToOneExecutorAKind(t *testing.T) {
	for _, walk := range requestWalks {
		declaredIn, calls, files := packageCalls(t, walk.dir)
		want := map[string]string{} // executor → its file
		for _, kind := range walk.kinds {
			file, function, _ := strings.Cut(kind, ":")
			want[function] = file
			if !slices.Contains(declaredIn[function], file) {
				t.Errorf("%s/%s does not declare the executor %s", walk.dir, file, function)
			}
		}
		dispatched := dispatchedCalls(t, files[walk.handler], walk.dispatch)
		var got []string
		for _, name := range dispatched {
			if _, executor := want[name]; executor {
				got = append(got, name)
			}
		}
		sort.Strings(got)
		var names []string
		for name := range want {
			names = append(names, name)
		}
		sort.Strings(names)
		if !slices.Equal(got, names) {
			t.Errorf("%s/%s's %s dispatches to %v, want one executor a kind: %v", walk.dir, walk.handler, walk.dispatch, got, names)
		}
		// Every other call from the handler's file into the walk is a step
		// taken out of its executor.
		below := map[string]bool{}
		for _, layer := range walk.layers {
			for _, file := range layer {
				below[file] = !slices.Contains(walk.shared, file)
			}
		}
		for _, call := range calls[walk.handler] {
			name := calledName(call)
			if _, executor := want[name]; executor {
				continue
			}
			for _, callee := range declaredIn[name] {
				if below[callee] {
					t.Errorf("%s/%s calls %s of %s: the handler's file plans and dispatches, the executor takes its steps", walk.dir, walk.handler, name, callee)
				}
			}
		}
	}
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
