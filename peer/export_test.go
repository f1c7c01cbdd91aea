package peer

import (
	"time"

	"github.com/rs/zerolog"
)

// NewServerWithMaxAge is NewServer whose connections are served for at
// most age, and grace more for the calls under way: a bound a test can
// wait for.
func NewServerWithMaxAge(cfg Config, log zerolog.Logger, age, grace time.Duration) *Server {
	return newServer(cfg, log, connectionAge{max: age, grace: grace})
}
