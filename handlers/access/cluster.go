package access

import (
	"os"
	"path/filepath"

	"github.com/dwr-run/dwr/domain"
)

// Files of a cluster's NATS configuration in a directory, as `dwr admin
// nats-config --dir DIR` writes them.
const (
	ClusterConfigFile = "dwr-accounts.conf" // the accounts block each nats-server includes
	ServiceSeedFile   = "service.nk"        // the service's credential, for every replica
)

// ClusterConfig is a cluster's NATS configuration in a directory: the
// service's credential and the admin's, made once and kept, and the
// accounts block that Write renders.
type ClusterConfig struct {
	Dir        string
	ServiceKey string // the public key of ServiceSeedFile
	AdminKey   string // the public key of AdminCredsFile
}

// OpenClusterConfig returns the configuration in dir, making the directory
// and its credential files the first time. It returns an error when they
// cannot be read or written.
func OpenClusterConfig(dir string) (*ClusterConfig, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	c := &ClusterConfig{Dir: dir}
	var err error
	if c.ServiceKey, _, err = EnsureCredential(c.ServiceSeed(), "the dwr service's own user (account "+ServiceAccount+"): give it to every replica with --nats-creds"); err != nil {
		return nil, err
	}
	if c.AdminKey, _, err = EnsureCredential(c.AdminCreds(), "admin of every workspace"); err != nil {
		return nil, err
	}
	return c, nil
}

// ServiceSeed returns the path of the service's credential.
func (c *ClusterConfig) ServiceSeed() string { return filepath.Join(c.Dir, ServiceSeedFile) }

// AdminCreds returns the path of the admin's credential.
func (c *ClusterConfig) AdminCreds() string { return filepath.Join(c.Dir, AdminCredsFile) }

// Write writes ClusterConfigFile (mode 0600): the accounts, with the
// service, the admin and the members of workspaces as users. It returns the
// file's path and the number of identities in it.
func (c *ClusterConfig) Write(workspaces []*domain.Workspace, insecureOpen bool) (path string, identities int, err error) {
	spec := Spec{ServiceKeys: []string{c.ServiceKey}, InsecureOpen: insecureOpen,
		Identities: IdentitiesOf([]Admin{{Name: AdminName, PublicKey: c.AdminKey}}, workspaces)}
	path = filepath.Join(c.Dir, ClusterConfigFile)
	return path, len(spec.Identities), os.WriteFile(path, []byte(ServerConfig(spec)), 0o600)
}
