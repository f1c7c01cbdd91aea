package nomadbridge

import (
	"flag"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
)

// settings are the bridge's flags; each can come from the variable its usage
// names (the unit reads the daemon's configuration file into them).
type settings struct {
	host       hostConfig
	endpoint   string
	address    string
	tokenFile  string
	caCert     string
	clientCert string
	clientKey  string
	logLevel   string
}

// Flags is the bridge's flag set and the rule each value must meet: the
// variables it reads share the daemon's configuration file.
func Flags() (*flag.FlagSet, []envflag.Rule) {
	return declareFlags(&settings{})
}

// declareFlags declares the bridge's flags into s and gives their rules,
// which envflag.Parse holds them to before the bridge starts anything: a
// wrong value stops it (exit 78) instead of failing later and restarting
// forever. Every flag has a rule (TestEveryFlagHasARule in package cli).
func declareFlags(s *settings) (*flag.FlagSet, []envflag.Rule) {
	flags := flag.NewFlagSet("zfs-csi nomad-bridge", flag.ContinueOnError)
	flags.StringVar(&s.host.DataDir, "nomad-data-dir", "/opt/nomad/data", "the Nomad client's data_dir [ZFS_CSI_NOMAD_DATA_DIR]")
	flags.StringVar(&s.host.Namespace, "nomad-namespace", "zfs-csi", "the plugin job's namespace [ZFS_CSI_NOMAD_NAMESPACE]")
	flags.StringVar(&s.host.Job, "nomad-job", "zfs-csi", "the plugin job's ID [ZFS_CSI_NOMAD_JOB]")
	flags.StringVar(&s.host.PluginID, "driver-name", "zfs.csi.dev", "the daemon's driver name: the plugin job's csi_plugin id [ZFS_CSI_DRIVER_NAME]")
	envflag.Endpoint(flags, &s.endpoint)
	flags.StringVar(&s.address, "nomad-addr", "http://127.0.0.1:4646", "the local Nomad agent's HTTP API [NOMAD_ADDR]")
	flags.StringVar(&s.tokenFile, "nomad-token-file", "/etc/zfs-csi/nomad-token", "a Nomad ACL token that may read the plugin job (mode 0600); none when the file does not exist [ZFS_CSI_NOMAD_TOKEN_FILE]")
	flags.StringVar(&s.caCert, "nomad-cacert", "", "CA certificate of the agent's HTTPS [NOMAD_CACERT]")
	flags.StringVar(&s.clientCert, "nomad-client-cert", "", "client certificate for the agent's HTTPS [NOMAD_CLIENT_CERT]")
	flags.StringVar(&s.clientKey, "nomad-client-key", "", "its key [NOMAD_CLIENT_KEY]")
	flags.StringVar(&s.logLevel, "log-level", "info", "debug, info, warn or error [ZFS_CSI_LOG_LEVEL]")
	nomadAddress := envflag.Check{Allowed: "http://HOST:PORT or https://HOST:PORT", Test: func(value any) error {
		// The API client's own reading of the address; without TLS files
		// it reads none.
		if _, err := newNomadAPI(value.(string), "", "", "", ""); err != nil {
			return envflag.ErrNotAllowed
		}
		return nil
	}}
	return flags, []envflag.Rule{
		{Flag: "nomad-data-dir", Check: envflag.AbsolutePath},
		{Flag: "nomad-namespace", Check: envflag.NotEmpty("the plugin job's namespace")},
		{Flag: "nomad-job", Check: envflag.NotEmpty("the plugin job's ID")},
		{Flag: "driver-name", Check: envflag.DriverName},
		{Flag: "endpoint", Check: envflag.UnixEndpoint},
		{Flag: "nomad-addr", Check: nomadAddress},
		{Flag: "nomad-token-file", Check: envflag.AbsolutePath},
		{Flag: "nomad-cacert", Check: envflag.Optional(envflag.File, "the system's CAs")},
		{Flag: "nomad-client-cert", Check: envflag.Optional(envflag.File, "none")},
		{Flag: "nomad-client-key", Check: envflag.Optional(envflag.File, "none")},
		{Flag: "log-level", Check: envflag.LogLevel},
	}
}
