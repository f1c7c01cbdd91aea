package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// module is this module's path; the rules below name packages relative to it.
const module = "github.com/zfs-csi/zfs-csi"

// goPackage is what `go list -json` says about one package of the module.
type goPackage struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// name is the package's path inside the module: "" for the root, "cli/ctl".
func (p goPackage) name() string {
	return strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
}

// testSupport says whether the package exists for tests only
// (wiring/wiringtest, zfs/zfstest, node/nodetest): it may build fixtures from any
// package under the commands, and production code never imports it.
func (p goPackage) testSupport() bool { return isTestSupport(p.name()) }

func isTestSupport(name string) bool { return strings.HasSuffix(path.Base(name), "test") }

// own is the package's imports of this module, by name; withTests adds what
// its tests import.
func (p goPackage) own(withTests bool) []string {
	imports := p.Imports
	if withTests {
		imports = slices.Concat(p.Imports, p.TestImports, p.XTestImports)
	}
	var names []string
	for _, imported := range imports {
		if imported == module || strings.HasPrefix(imported, module+"/") {
			if name := (goPackage{ImportPath: imported}).name(); name != p.name() && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

func listPackages(t *testing.T) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,GoFiles,Imports,TestImports,XTestImports", "./...")
	out, err := cmd.Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			t.Fatalf("go list: %v\n%s", err, exitErr.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var packages []goPackage
	decoder := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := decoder.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		packages = append(packages, p)
	}
	if len(packages) < 10 {
		t.Fatalf("go list found only %d packages", len(packages))
	}
	return packages
}

// top is the first element of a package's name: what its layer is decided by.
func top(name string) string {
	first, _, _ := strings.Cut(name, "/")
	return first
}

// layers rank the module's top-level packages. Code imports lower ranks, or
// packages of its own subtree (cli/report → cli/ctl); a package of a new
// top-level directory has to be given its place here first.
var layers = map[string]int{
	"":           7, // main: the entry point
	"cli":        6, // the commands, the daemon among them
	"wiring":     5, // the services and the daemon's sockets put together
	"controller": 4, "node": 4, "inventory": 4, "metrics": 4, "snapmeta": 4,
	"peer":    4, // the channel between daemons; the controller gets it injected
	"forward": 3, // controller calls taken to their node, and answered there
	"rpc":     2, // the gRPC server, its interceptors, errors → codes, Identity
	"rules":   1, // the domain rules every service asks: IDs, names, ownership
	"zfs":     0, // the storage layer: knows nothing of CSI
}

// sideways are the imports allowed between different packages of one rank.
var sideways = map[[2]string]string{
	{"inventory", "node"}: "the operator tools read the mount table with the node service's parser",
}

// outside the layering: programs and tests that drive the binary from without.
var outside = []string{"e2e", "packaging"}

// long: subtests on one shared fixture, one behaviour each
func TestImportsPointOneWay(t *testing.T) {
	packages := listPackages(t)

	t.Run("every package has a place in the layers", func(t *testing.T) {
		for _, p := range packages {
			if _, ok := layers[top(p.name())]; !ok && !slices.Contains(outside, top(p.name())) {
				t.Errorf("%s is in no layer: give %q a rank in imports_test.go", p.ImportPath, top(p.name()))
			}
		}
	})

	t.Run("main imports only the command table", func(t *testing.T) {
		for _, p := range packages {
			if p.name() == "" && !slices.Equal(p.own(false), []string{"cli"}) {
				t.Errorf("main imports %q; it hands everything to cli", p.own(false))
			}
		}
	})

	t.Run("each layer imports only lower layers or its own subpackages, tests included", func(t *testing.T) {
		for _, p := range packages {
			from, ok := layers[top(p.name())]
			if !ok || p.testSupport() {
				continue
			}
			for _, imported := range p.own(true) {
				to, known := layers[top(imported)]
				switch {
				case top(imported) == top(p.name()):
				case isTestSupport(imported):
					// a test's fixture may be built from anything; production
					// code may not import it at all (the last rule)
				case !known:
					t.Errorf("%s imports %s, which is outside the layers", p.name(), imported)
				case from == to && sideways[[2]string{top(p.name()), top(imported)}] != "":
				case from <= to:
					t.Errorf("%s (rank %d) imports %s (rank %d): imports point down only", p.name(), from, imported, to)
				}
			}
		}
	})

	t.Run("controller and node never import each other, tests included", func(t *testing.T) {
		for _, p := range packages {
			for _, pair := range [][2]string{{"controller", "node"}, {"node", "controller"}} {
				if top(p.name()) == pair[0] && slices.ContainsFunc(p.own(true), func(name string) bool { return top(name) == pair[1] }) {
					t.Errorf("%s imports %s", p.name(), pair[1])
				}
			}
		}
	})

	t.Run("zfs imports no CSI, gRPC or Kubernetes package and nothing of the module outside zfs, tests included", func(t *testing.T) {
		for _, p := range packages {
			if top(p.name()) != "zfs" {
				continue
			}
			for _, imported := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
				for _, banned := range []string{"github.com/container-storage-interface/", "google.golang.org/grpc", "k8s.io/"} {
					if strings.HasPrefix(imported, banned) {
						t.Errorf("%s imports %s", p.name(), imported)
					}
				}
			}
			for _, imported := range p.own(true) {
				if top(imported) != "zfs" {
					t.Errorf("%s imports %s", p.name(), imported)
				}
			}
		}
	})

	t.Run("rules runs no server: it imports no gRPC package, tests included", func(t *testing.T) {
		for _, p := range packages {
			if top(p.name()) != "rules" {
				continue
			}
			for _, imported := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
				if strings.HasPrefix(imported, "google.golang.org/grpc") {
					t.Errorf("%s imports %s: its refusals are typed errors, which rpc maps to codes", p.name(), imported)
				}
			}
		}
	})

	t.Run("of the commands only the daemon builds the services; the others use its socket or read ZFS", func(t *testing.T) {
		for _, p := range packages {
			if top(p.name()) != "cli" || p.name() == "cli" || p.name() == "cli/daemon" {
				continue
			}
			for _, imported := range p.own(false) {
				if slices.Contains([]string{"wiring", "controller", "node", "forward"}, top(imported)) {
					t.Errorf("%s imports %s", p.name(), imported)
				}
			}
		}
	})

	t.Run("no production package imports test support", func(t *testing.T) {
		for _, p := range packages {
			if p.testSupport() {
				continue
			}
			for _, imported := range p.Imports {
				if imported == "testing" || (strings.HasPrefix(imported, module+"/") && isTestSupport(imported)) {
					t.Errorf("%s imports %s outside its tests", p.name(), imported)
				}
			}
		}
	})
}

// daemonBuilds are the calls by whose names a package builds something
// that runs: a constructor, a listener, a server.
var daemonBuilds = regexp.MustCompile(`^(New|Listen|Serve)`)

// daemonMayCall are the packages whose constructors cli/daemon may call,
// and the calls of that shape that build nothing; everything else it runs
// comes from wiring.NewDaemon.
var daemonMayCall = map[string]string{
	module + "/wiring":                "the one constructor of what the daemon runs (NewDaemon)",
	"flag":                            "the command's flags",
	"errors":                          "error values",
	"github.com/rs/zerolog":           "the command's logger",
	module + "/metrics.ListenAddress": "reads --metrics-address for its rule; listens nowhere",
}

// The daemon's command keeps its flags, signals, logger and service-manager
// notifications; what it runs (the zfs runner, the services, servers,
// listeners, the peer channel, the reaper) is built by wiring.NewDaemon, the
// constructor the tests use too, so that what is tested is what runs. It may
// import controller, node, peer and metrics for their option types and
// checks, never to build from them.
func TestTheDaemonCommandBuildsNothingItRuns(t *testing.T) {
	var daemon goPackage
	for _, p := range listPackages(t) {
		if p.name() == "cli/daemon" {
			daemon = p
		}
	}
	if !slices.Contains(daemon.own(false), "wiring") {
		t.Fatalf("cli/daemon does not import wiring, where what it runs is built (it imports %q)", daemon.own(false))
	}
	for _, file := range daemon.GoFiles {
		fset := token.NewFileSet()
		parsed, err := parser.ParseFile(fset, filepath.Join(daemon.Dir, file), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		imports := importNames(parsed)
		ast.Inspect(parsed, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			selector, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			receiver, ok := selector.X.(*ast.Ident)
			if !ok || !daemonBuilds.MatchString(selector.Sel.Name) {
				return true
			}
			imported, isPackage := imports[receiver.Name]
			if !isPackage {
				return true // a method of a value
			}
			if daemonMayCall[imported] == "" && daemonMayCall[imported+"."+selector.Sel.Name] == "" {
				t.Errorf("%s: cli/daemon calls %s.%s: what the daemon runs is built by wiring.NewDaemon",
					fset.Position(call.Pos()), imported, selector.Sel.Name)
			}
			return true
		})
	}
}

// majorVersion is the last element of a module path that names its major
// version (…/go-zfs/v3), not its package.
var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// importNames maps the names a file's imports are known by to their paths.
func importNames(file *ast.File) map[string]string {
	names := map[string]string{}
	for _, spec := range file.Imports {
		importPath := strings.Trim(spec.Path.Value, `"`)
		name := path.Base(importPath)
		if majorVersion.MatchString(name) {
			name = path.Base(path.Dir(importPath))
		}
		if spec.Name != nil {
			name = spec.Name.Name
		}
		names[name] = importPath
	}
	return names
}

// Fakes live beside what they fake, in a test-support package (zfs/zfstest,
// node/nodetest): production code declares none.
func TestProductionPackagesCarryNoFakes(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.testSupport() || top(p.name()) == "e2e" {
			continue
		}
		for _, file := range p.GoFiles {
			parsed, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, file), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for name := range topLevelNames(parsed) {
				if strings.HasPrefix(strings.ToLower(name), "fake") {
					t.Errorf("%s/%s declares %s: move it to a test-support package", p.name(), file, name)
				}
			}
		}
	}
}

// topLevelNames yields the names a file declares at package level.
func topLevelNames(file *ast.File) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for _, decl := range file.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if !yield(decl.Name.Name) {
					return
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if !yield(spec.Name.Name) {
							return
						}
					case *ast.ValueSpec:
						for _, name := range spec.Names {
							if !yield(name.Name) {
								return
							}
						}
					}
				}
			}
		}
	}
}
