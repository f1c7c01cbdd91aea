// Package kubelet registers the daemon with kubelet without the
// node-driver-registrar sidecar: the daemon runs on the host, so it serves
// kubelet's registration API itself, beside the CSI socket kubelet and the
// sidecars use. Only the daemon serves it; the operator commands read its
// socket paths.
package kubelet

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/zfs-csi/zfs-csi/rpc"
)

// kubelet watches <kubelet-dir>/plugins_registry; when a socket appears there
// it calls GetInfo, then NodeGetInfo on the endpoint GetInfo names, then
// NotifyRegistrationStatus with the outcome. Removing the socket
// deregisters the plugin.

// DefaultSocketCheckInterval is how often the kubelet sockets are checked
// for removal. A stat every few seconds is cheap, needs no inotify watch
// (which would miss the directory itself being removed and recreated), and
// kubelet's own plugin watcher reacts within a second once the socket is back.
const DefaultSocketCheckInterval = 5 * time.Second

// csiVersions are the CSI versions kubelet may speak to the plugin.
var csiVersions = []string{"1.0.0"}

// Config places the sockets kubelet looks for.
type Config struct {
	// Dir is kubelet's root directory (its --root-dir).
	Dir string
	// DriverName is the CSI plugin name; it names the sockets too.
	DriverName string
	// CheckInterval is how often removed sockets are noticed; 0 means
	// DefaultSocketCheckInterval.
	CheckInterval time.Duration
}

// CSISocket is where kubelet and the sidecars reach the CSI services.
func (c Config) CSISocket() string {
	return filepath.Join(c.Dir, "plugins", c.DriverName, "csi.sock")
}

// RegistrationSocket is where kubelet's plugin watcher finds the plugin.
func (c Config) RegistrationSocket() string {
	return filepath.Join(c.Dir, "plugins_registry", c.DriverName+"-reg.sock")
}

// Server serves the CSI services (as the wiring adapts them for Kubernetes) on
// CSISocket and kubelet's registration API on RegistrationSocket, and listens
// again on either when its file is removed or replaced.
type Server struct {
	cfg          Config
	log          zerolog.Logger
	csi          *rpc.Server
	registration *grpc.Server
	service      *registrationService
	sockets      []*keptSocket // CSI first: kubelet calls it as soon as it sees the other
	stop         chan struct{}
	stopped      chan struct{}
}

// New prepares both servers; extra interceptors wrap the CSI calls as
// in rpc.NewServer.
func New(log zerolog.Logger, cfg Config, services rpc.Services, extra ...grpc.UnaryServerInterceptor) *Server {
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultSocketCheckInterval
	}
	log = log.With().Str("kubelet_dir", cfg.Dir).Logger()
	k := &Server{
		cfg:          cfg,
		log:          log,
		csi:          rpc.NewServer(log, services, extra...),
		registration: grpc.NewServer(),
		service: &registrationService{log: log, info: &registerapi.PluginInfo{
			Type:              registerapi.CSIPlugin,
			Name:              cfg.DriverName,
			Endpoint:          cfg.CSISocket(),
			SupportedVersions: csiVersions,
		}},
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	registerapi.RegisterRegistrationServer(k.registration, k.service)
	k.sockets = []*keptSocket{
		{path: cfg.CSISocket(), serve: k.csi.ServeOn, log: log},
		{path: cfg.RegistrationSocket(), serve: k.registration.Serve, log: log},
	}
	return k
}

// Listen opens both sockets, the CSI one first, and starts serving them and
// watching for their removal.
func (k *Server) Listen() error {
	for i, socket := range k.sockets {
		if err := socket.listen(); err != nil {
			for _, opened := range k.sockets[:i] {
				opened.close()
			}
			return err
		}
	}
	k.log.Info().Str("csi_socket", k.cfg.CSISocket()).Str("registration_socket", k.cfg.RegistrationSocket()).
		Msg("serving kubelet")
	go k.keep()
	return nil
}

func (k *Server) keep() {
	defer close(k.stopped)
	ticker := time.NewTicker(k.cfg.CheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-ticker.C:
			for _, socket := range k.sockets {
				socket.check()
			}
		}
	}
}

// Stop removes the registration socket first, so that kubelet deregisters
// the plugin before its endpoint goes, then stops the CSI server as
// rpc.Server.Stop does.
func (k *Server) Stop(ctx context.Context) {
	close(k.stop)
	<-k.stopped
	for i := len(k.sockets) - 1; i >= 0; i-- {
		k.sockets[i].close()
	}
	k.registration.Stop()
	k.csi.Stop(ctx)
}

// RegistrationStatus is what kubelet last reported, or nil before it did.
func (k *Server) RegistrationStatus() *registerapi.RegistrationStatus {
	k.service.mu.Lock()
	defer k.service.mu.Unlock()
	return k.service.status
}

// registrationService is kubelet's pluginregistration/v1 Registration API.
type registrationService struct {
	registerapi.UnimplementedRegistrationServer
	log    zerolog.Logger
	info   *registerapi.PluginInfo
	mu     sync.Mutex
	status *registerapi.RegistrationStatus
}

// GetInfo implements registerapi.RegistrationServer.
func (r *registrationService) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	r.log.Debug().Str("endpoint", r.info.GetEndpoint()).Msg("kubelet asked for the plugin info")
	return r.info, nil
}

// NotifyRegistrationStatus implements registerapi.RegistrationServer. A
// refusal is logged, not fatal: kubelet retries while the socket exists.
func (r *registrationService) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	r.status = status
	r.mu.Unlock()
	if status.GetPluginRegistered() {
		r.log.Info().Str("driver", r.info.GetName()).Msg("kubelet registered the plugin")
	} else {
		r.log.Error().Str("driver", r.info.GetName()).Str("error", status.GetError()).
			Msg("kubelet refused to register the plugin; it retries while the registration socket exists")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// keptSocket is a unix socket that is listened on again when its file is
// removed (kubelet's directory wiped, an operator's rm) or replaced.
type keptSocket struct {
	path     string
	serve    func(net.Listener) error
	log      zerolog.Logger
	listener *net.UnixListener // nil while listening failed
	file     os.FileInfo       // the socket file as created
}

// listen creates the socket and serves it.
func (s *keptSocket) listen() error {
	listener, file, err := rpc.ListenUnix(s.path)
	if err != nil {
		return err
	}
	s.listener, s.file = listener, file
	go func() {
		if err := s.serve(listener); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Warn().Err(err).Str("socket", s.path).Msg("serving stopped")
		}
	}()
	return nil
}

// ours reports whether the path still holds the socket this listener made.
func (s *keptSocket) ours() bool {
	file, err := os.Lstat(s.path)
	return err == nil && s.file != nil && os.SameFile(file, s.file)
}

// check listens again when the socket is gone or is not ours any more.
func (s *keptSocket) check() {
	if s.listener != nil && s.ours() {
		return
	}
	if s.listener != nil {
		s.log.Warn().Str("socket", s.path).Msg("socket removed or replaced; listening again")
		s.listener.Close()
		s.listener, s.file = nil, nil
	}
	if err := s.listen(); err != nil {
		s.log.Error().Err(err).Str("socket", s.path).Msg("cannot listen again; retrying")
		return
	}
	s.log.Info().Str("socket", s.path).Msg("socket recreated")
}

// close stops listening and removes the file if it is still ours.
func (s *keptSocket) close() {
	if s.listener == nil {
		return
	}
	if s.ours() {
		if err := os.Remove(s.path); err != nil {
			s.log.Warn().Err(err).Str("socket", s.path).Msg("cannot remove the socket")
		}
	}
	s.listener.Close()
	s.listener, s.file = nil, nil
}
