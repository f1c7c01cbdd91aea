package nomadbridge

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// hostConfig says which allocations are the plugin job's and where to
// forward their connections.
type hostConfig struct {
	DataDir   string // the Nomad client's data_dir
	Namespace string // the plugin job's namespace
	Job       string // the plugin job's ID
	PluginID  string // its csi_plugin id: the daemon's driver name
	Target    string // the daemon's socket
}

// pluginsDir is where Nomad's plugin supervisor makes one socket directory
// per allocation of a csi_plugin task (<data_dir>/client/csi/plugins/<alloc
// ID>, 0700 root, bound into the task at csi_plugin.mount_dir) and where
// it connects to <dir>/csi.sock.
func pluginsDir(dataDir string) string { return filepath.Join(dataDir, "client", "csi", "plugins") }

// allocIDPattern is the form of Nomad's allocation IDs (UUIDs); nothing
// else in the plugins directory is Nomad's.
var allocIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// recheckAfter spaces out lookups of an allocation whose answer may change:
// Nomad unreachable, or the token not (yet) allowed to read it.
const recheckAfter = 10 * time.Second

type allocations interface {
	Allocation(ctx context.Context, id string) (*allocation, error)
}

// host serves the daemon in the socket directories of the plugin job's
// allocations on this client, and nowhere else.
type host struct {
	cfg     hostConfig
	nomad   allocations
	log     zerolog.Logger
	served  map[string]*servedAlloc
	refused map[string]refusal
}

type servedAlloc struct {
	bridge *bridge
	stop   context.CancelFunc
	done   chan struct{}
}

// refusal is remembered so that a refused allocation is not looked up on
// every scan. final: Nomad said whose it is, which never changes. Only the
// first of the refusals of an allocation that is looked up again is a
// warning; the others are logged at debug.
type refusal struct {
	final bool
	at    time.Time
}

func newHost(cfg hostConfig, nomad allocations, log zerolog.Logger) *host {
	return &host{cfg: cfg, nomad: nomad, log: log, served: map[string]*servedAlloc{}, refused: map[string]refusal{}}
}

// run scans every interval until ctx ends, then stops every bridge.
func (h *host) run(ctx context.Context, interval time.Duration) error {
	h.log.Info().Str("plugins", pluginsDir(h.cfg.DataDir)).Str("namespace", h.cfg.Namespace).Str("job", h.cfg.Job).
		Str("plugin", h.cfg.PluginID).Str("target", h.cfg.Target).Msg("serving the daemon to the plugin job's allocations")
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		h.scan(ctx)
		select {
		case <-ctx.Done():
			h.stopAll()
			h.log.Info().Msg("bridge stopped")
			return nil
		case <-ticker.C:
		}
	}
}

// scan brings the bridges in line with the socket directories Nomad holds.
func (h *host) scan(ctx context.Context) {
	present := map[string]bool{}
	entries, err := os.ReadDir(pluginsDir(h.cfg.DataDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.log.Warn().Err(err).Msg("cannot read Nomad's plugin socket directories")
		return
	}
	for _, entry := range entries {
		// ReadDir reports a symbolic link as one, not as its target: only
		// directories Nomad made are considered.
		if entry.Type() == fs.ModeDir && allocIDPattern.MatchString(entry.Name()) {
			present[entry.Name()] = true
		}
	}
	for id, s := range h.served {
		// Nomad removes the directory when the allocation's plugin task
		// stops for good; a socket that is no longer this bridge's was
		// replaced by someone else, and the next scan looks again.
		if !present[id] || !s.bridge.holdsSocket() {
			h.log.Info().Str("alloc", id).Msg("allocation gone: bridge closed")
			s.stop()
			<-s.done
			delete(h.served, id)
		}
	}
	for id := range h.refused {
		if !present[id] {
			delete(h.refused, id)
		}
	}
	for id := range present {
		if _, ok := h.served[id]; ok {
			continue
		}
		if r, ok := h.refused[id]; ok && (r.final || time.Since(r.at) < recheckAfter) {
			continue
		}
		h.consider(ctx, id)
	}
}

// consider asks Nomad whose allocation id is, and serves it only when it is
// the plugin job's.
func (h *host) consider(ctx context.Context, id string) {
	log := h.log.With().Str("alloc", id).Logger()
	_, seen := h.refused[id]
	level := zerolog.WarnLevel
	if seen {
		level = zerolog.DebugLevel
	}
	lookupCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	alloc, err := h.nomad.Allocation(lookupCtx, id)
	cancel()
	if err != nil {
		h.refused[id] = refusal{at: time.Now()}
		if errors.Is(err, errUnknownAllocation) {
			log.WithLevel(level).Msgf("allocation refused: %v (another namespace than %q, or a token without read-job there); asking again every %s",
				err, h.cfg.Namespace, recheckAfter)
		} else {
			log.WithLevel(level).Err(err).Msg("cannot ask Nomad whose allocation this is: trying again")
		}
		return
	}
	why, err := h.notThePlugin(alloc, id)
	if err != nil {
		h.refused[id] = refusal{at: time.Now()}
		log.WithLevel(level).Err(err).Msg("cannot check the allocation: trying again")
		return
	}
	if why != "" {
		h.refused[id] = refusal{final: true, at: time.Now()}
		log.Warn().Str("namespace", bounded(alloc.Namespace)).Str("job", bounded(alloc.JobID)).
			Msgf("allocation refused: %s; the daemon is served only to job %q in namespace %q", why, h.cfg.Job, h.cfg.Namespace)
		return
	}
	dir := filepath.Join(pluginsDir(h.cfg.DataDir), id)
	// Listening makes missing directories; one Nomad removed since the
	// scan must stay removed.
	if info, err := os.Lstat(dir); err != nil || !info.IsDir() {
		return
	}
	b, err := newBridge(filepath.Join(dir, "csi.sock"), h.cfg.Target, log)
	if err != nil {
		h.refused[id] = refusal{at: time.Now()}
		log.Warn().Err(err).Msg("cannot listen in the allocation's socket directory: trying again")
		return
	}
	serveCtx, stop := context.WithCancel(context.Background())
	s := &servedAlloc{bridge: b, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := b.serve(serveCtx); err != nil {
			log.Warn().Err(err).Msg("bridge stopped")
		}
	}()
	h.served[id] = s
	delete(h.refused, id)
}

// notThePlugin says why alloc is not an allocation of the plugin job on
// this client, or "" when it is.
func (h *host) notThePlugin(alloc *allocation, id string) (string, error) {
	if alloc.ID != id {
		return fmt.Sprintf("Nomad answered for allocation %q", bounded(alloc.ID)), nil
	}
	if alloc.Namespace != h.cfg.Namespace || alloc.JobID != h.cfg.Job {
		return fmt.Sprintf("it belongs to job %q in namespace %q", bounded(alloc.JobID), bounded(alloc.Namespace)), nil
	}
	nodeID, err := os.ReadFile(filepath.Join(h.cfg.DataDir, "client", "client-id"))
	if err != nil {
		return "", fmt.Errorf("this client's node ID: %w", err)
	}
	if alloc.NodeID != strings.TrimSpace(string(nodeID)) {
		return fmt.Sprintf("it is placed on node %q, not on this client", bounded(alloc.NodeID)), nil
	}
	for _, group := range alloc.Job.TaskGroups {
		if group.Name != alloc.TaskGroup {
			continue
		}
		for _, task := range group.Tasks {
			if task.CSIPluginConfig != nil && task.CSIPluginConfig.ID == h.cfg.PluginID {
				return "", nil
			}
		}
	}
	return fmt.Sprintf("its group %q has no csi_plugin %q", bounded(alloc.TaskGroup), h.cfg.PluginID), nil
}

func (h *host) stopAll() {
	for id, s := range h.served {
		s.stop()
		<-s.done
		delete(h.served, id)
	}
}
