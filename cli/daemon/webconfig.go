package daemon

import (
	"errors"
	"fmt"

	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/crypto/bcrypt"
)

// checkWebConfig reads the web configuration file, its certificate and key
// once at start (the rule of --metrics-web-config): a file that cannot serve
// is the operator's mistake, which a restart cannot mend (exit 78), better
// said now than on every scrape.
// exporter-toolkit reads the file again for each connection and request, so
// a renewed certificate or a changed password needs no restart.
func checkWebConfig(path string) error {
	if path == "" {
		return nil
	}
	err := web.Validate(path)
	var prefix bcrypt.InvalidHashPrefixError
	if errors.As(err, &prefix) || errors.Is(err, bcrypt.ErrHashTooShort) {
		// bcrypt's message quotes the first byte of what it was given, which
		// is a password's when one was written where its hash belongs.
		err = errors.New("a password in basic_auth_users is not a bcrypt hash")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
