package nomadbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

const (
	thisNode  = "5a7c0b4e-0000-4000-8000-000000000001"
	otherNode = "5a7c0b4e-0000-4000-8000-000000000002"
)

// fakeNomad answers GET /v1/allocation/:id from a table, as an agent whose
// token reads the plugin namespace only: allocations elsewhere are 404.
type fakeNomad struct {
	mu       sync.Mutex
	allocs   map[string]map[string]any
	readable string // the namespace the token may read
	token    string
	lookups  map[string]int
}

func (f *fakeNomad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("X-Nomad-Token") != f.token {
		http.Error(w, "Permission denied", http.StatusForbidden)
		return
	}
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/allocation/")
	f.lookups[id]++
	alloc, found := f.allocs[id]
	if !ok || !found {
		http.Error(w, "alloc not found", http.StatusNotFound)
		return
	}
	// What Nomad 1.6.3 answers for an allocation in a namespace the
	// token may not read.
	if alloc["Namespace"] != f.readable {
		http.Error(w, fmt.Sprintf("Unknown allocation %q", id), http.StatusInternalServerError)
		return
	}
	json.NewEncoder(w).Encode(alloc)
}

func nomadAlloc(id, namespace, job, node, pluginID string) map[string]any {
	task := map[string]any{"Name": "plugin"}
	if pluginID != "" {
		task["CSIPluginConfig"] = map[string]any{"ID": pluginID, "Type": "monolith"}
	}
	return map[string]any{"ID": id, "Namespace": namespace, "JobID": job, "TaskGroup": "plugin", "NodeID": node,
		"Job": map[string]any{"ID": job, "TaskGroups": []any{map[string]any{"Name": "plugin", "Tasks": []any{task}}}}}
}

type hostFixture struct {
	dataDir string
	nomad   *fakeNomad
	host    *host
}

func newHostFixture(t *testing.T) *hostFixture {
	t.Helper()
	// Unix socket paths are short (108 bytes): not t.TempDir's long names.
	dir, err := os.MkdirTemp("", "nomad")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40})
	if err := fake.Create(context.Background(), "tank/csi", zfs.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	daemonSocket := filepath.Join(dir, "daemon.sock")
	stopDaemon := startDaemon(t, fake, daemonSocket)
	t.Cleanup(stopDaemon)

	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(pluginsDir(dataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "client", "client-id"), []byte(thisNode), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("secret-of-the-bridge\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nomad := &fakeNomad{allocs: map[string]map[string]any{}, readable: "zfs-csi", token: "secret-of-the-bridge", lookups: map[string]int{}}
	server := httptest.NewServer(nomad)
	t.Cleanup(server.Close)
	api, err := newNomadAPI(server.URL, tokenFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostConfig{DataDir: dataDir, Namespace: "zfs-csi", Job: "zfs-csi", PluginID: "zfs.csi.dev", Target: daemonSocket}
	h := newHost(cfg, api, zerolog.New(zerolog.NewTestWriter(t)))
	t.Cleanup(h.stopAll)
	return &hostFixture{dataDir: dataDir, nomad: nomad, host: h}
}

// allocation makes the socket directory Nomad makes for an allocation of a
// csi_plugin task, and tells the fake API whose it is.
func (f *hostFixture) allocation(t *testing.T, id string, alloc map[string]any) string {
	t.Helper()
	dir := filepath.Join(pluginsDir(f.dataDir), id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if alloc != nil {
		f.nomad.mu.Lock()
		f.nomad.allocs[id] = alloc
		f.nomad.mu.Unlock()
	}
	return filepath.Join(dir, "csi.sock")
}

// pluginInfo calls the socket the way Nomad's plugin supervisor does.
func pluginInfo(t *testing.T, socket string) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	return info.GetName(), err
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// long: subtests on one shared fixture, one behaviour each
func TestNomadBridgeServesOnlyThePluginJob(t *testing.T) {
	f := newHostFixture(t)
	ctx := t.Context()
	plugin := f.allocation(t, "11111111-1111-4111-8111-111111111111", nomadAlloc("11111111-1111-4111-8111-111111111111", "zfs-csi", "zfs-csi", thisNode, "zfs.csi.dev"))
	refused := map[string]string{
		"the same job ID in another namespace": f.allocation(t, "22222222-2222-4222-8222-222222222222",
			nomadAlloc("22222222-2222-4222-8222-222222222222", "default", "zfs-csi", thisNode, "zfs.csi.dev")),
		"another job in the plugin's namespace": f.allocation(t, "33333333-3333-4333-8333-333333333333",
			nomadAlloc("33333333-3333-4333-8333-333333333333", "zfs-csi", "other-plugin", thisNode, "zfs.csi.dev")),
		"the plugin job's namespace and ID with another csi_plugin id": f.allocation(t, "44444444-4444-4444-8444-444444444444",
			nomadAlloc("44444444-4444-4444-8444-444444444444", "zfs-csi", "zfs-csi", thisNode, "other.csi.dev")),
		"an allocation Nomad places on another node": f.allocation(t, "55555555-5555-4555-8555-555555555555",
			nomadAlloc("55555555-5555-4555-8555-555555555555", "zfs-csi", "zfs-csi", otherNode, "zfs.csi.dev")),
		"an allocation Nomad does not know": f.allocation(t, "66666666-6666-4666-8666-666666666666", nil),
	}
	f.host.scan(ctx)

	t.Run("the plugin job's allocation reaches the daemon at the socket Nomad dials", func(t *testing.T) {
		if name, err := pluginInfo(t, plugin); err != nil || name != "zfs.csi.dev" {
			t.Errorf("GetPluginInfo = %q, %v", name, err)
		}
		if info, err := os.Lstat(plugin); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("socket: %v, %v", info, err)
		}
	})
	for what, socket := range refused {
		t.Run(what+" gets no socket", func(t *testing.T) {
			if exists(socket) {
				t.Errorf("%s exists", socket)
			}
		})
	}

	t.Run("Nomad's answers for an allocation the token may not see and for none at all both read as unknown", func(t *testing.T) {
		for _, id := range []string{"22222222-2222-4222-8222-222222222222", "66666666-6666-4666-8666-666666666666"} {
			if _, err := f.host.nomad.Allocation(ctx, id); !errors.Is(err, errUnknownAllocation) {
				t.Errorf("%s: %v, want errUnknownAllocation", id, err)
			}
		}
	})

	t.Run("a refusal Nomad cannot change is not asked again", func(t *testing.T) {
		f.host.scan(ctx)
		f.nomad.mu.Lock()
		defer f.nomad.mu.Unlock()
		if n := f.nomad.lookups["33333333-3333-4333-8333-333333333333"]; n != 1 {
			t.Errorf("looked up %d times, want 1", n)
		}
		if n := f.nomad.lookups["11111111-1111-4111-8111-111111111111"]; n != 1 {
			t.Errorf("the served allocation was looked up %d times, want 1", n)
		}
	})

	t.Run("a symbolic link in the plugins directory is not followed", func(t *testing.T) {
		target := t.TempDir()
		link := filepath.Join(pluginsDir(f.dataDir), "77777777-7777-4777-8777-777777777777")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		f.nomad.mu.Lock()
		f.nomad.allocs["77777777-7777-4777-8777-777777777777"] = nomadAlloc("77777777-7777-4777-8777-777777777777", "zfs-csi", "zfs-csi", thisNode, "zfs.csi.dev")
		f.nomad.mu.Unlock()
		f.host.scan(ctx)
		if exists(filepath.Join(target, "csi.sock")) {
			t.Error("the bridge listened through the link")
		}
	})

	t.Run("when Nomad removes the allocation's directory its bridge closes", func(t *testing.T) {
		if err := os.RemoveAll(filepath.Dir(plugin)); err != nil {
			t.Fatal(err)
		}
		f.host.scan(ctx)
		if len(f.host.served) != 0 {
			t.Errorf("still serving %d allocations", len(f.host.served))
		}
		if exists(filepath.Dir(plugin)) {
			t.Error("the bridge made the removed directory again")
		}
	})
}

func TestNomadBridgeAcrossRestarts(t *testing.T) {
	f := newHostFixture(t)
	ctx := t.Context()
	id := "88888888-8888-4888-8888-888888888888"
	socket := f.allocation(t, id, nomadAlloc(id, "zfs-csi", "zfs-csi", thisNode, "zfs.csi.dev"))

	t.Run("a socket left by an earlier bridge is replaced", func(t *testing.T) {
		stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		stale.SetUnlinkOnClose(false)
		stale.Close()
		f.host.scan(ctx)
		if name, err := pluginInfo(t, socket); err != nil || name != "zfs.csi.dev" {
			t.Errorf("GetPluginInfo = %q, %v", name, err)
		}
	})

	t.Run("stopping the bridge removes its sockets and nothing else", func(t *testing.T) {
		f.host.stopAll()
		if exists(socket) {
			t.Error("socket left behind")
		}
		if !exists(filepath.Dir(socket)) {
			t.Error("the bridge removed Nomad's directory")
		}
	})

	t.Run("a bridge started again serves the allocation again", func(t *testing.T) {
		f.host.scan(ctx)
		if name, err := pluginInfo(t, socket); err != nil || name != "zfs.csi.dev" {
			t.Errorf("GetPluginInfo = %q, %v", name, err)
		}
	})
}

func TestNomadBridgeWithoutAReadableToken(t *testing.T) {
	f := newHostFixture(t)
	id := "99999999-9999-4999-8999-999999999999"
	socket := f.allocation(t, id, nomadAlloc(id, "zfs-csi", "zfs-csi", thisNode, "zfs.csi.dev"))
	tokenFile := f.host.nomad.(*nomadAPI).tokenFile

	t.Run("a token file others may read is not used", func(t *testing.T) {
		if err := os.Chmod(tokenFile, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := f.host.nomad.Allocation(t.Context(), id)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("lookup with a world-readable token: %v", err)
		}
		f.host.scan(t.Context())
		if exists(socket) {
			t.Error("served without a usable token")
		}
	})

	t.Run("once the token is usable the allocation is served on a later scan", func(t *testing.T) {
		if err := os.Chmod(tokenFile, 0o600); err != nil {
			t.Fatal(err)
		}
		// As if recheckAfter had passed.
		f.host.refused[id] = refusal{at: time.Now().Add(-recheckAfter)}
		f.host.scan(t.Context())
		if name, err := pluginInfo(t, socket); err != nil || name != "zfs.csi.dev" {
			t.Errorf("GetPluginInfo = %q, %v", name, err)
		}
	})
}
