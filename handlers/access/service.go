package access

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ServiceIdentity is the service's own NATS user on an embedded server: a
// fresh nkey each start, kept in memory only, so no file can leak it.
type ServiceIdentity struct {
	kp        nkeys.KeyPair
	PublicKey string
}

// NewServiceIdentity makes a fresh service identity.
func NewServiceIdentity() (*ServiceIdentity, error) {
	kp, pub, err := newUser()
	if err != nil {
		return nil, fmt.Errorf("access: service key: %w", err)
	}
	return &ServiceIdentity{kp: kp, PublicKey: pub}, nil
}

// Option connects as the service.
func (s *ServiceIdentity) Option() nats.Option {
	return nats.Nkey(s.PublicKey, func(nonce []byte) ([]byte, error) { return s.kp.Sign(nonce) })
}

// ServiceOnly returns the accounts text of a server that only the service
// uses: for maintenance on a stopped deployment's data directory, where the
// streams live in ServiceAccount.
func ServiceOnly(id *ServiceIdentity) string {
	return ServerConfig(Spec{ServiceKeys: []string{id.PublicKey}})
}

// MigrateStore moves the streams of a data directory written without
// accounts (in nats-server's global account, $G: before dwr had accounts,
// or by an open test server) into ServiceAccount, once, while its server
// is stopped. It returns whether it moved them, and an error when both
// accounts hold streams.
func MigrateStore(dataDir string) (bool, error) {
	js := filepath.Join(dataDir, "nats", "jetstream")
	old, now := filepath.Join(js, "$G"), filepath.Join(js, ServiceAccount)
	if _, err := os.Stat(filepath.Join(old, "streams")); err != nil {
		return false, nil
	}
	if _, err := os.Stat(now); err == nil {
		return false, fmt.Errorf("access: both %s and %s hold streams: move one away", old, now)
	}
	if err := os.Rename(old, now); err != nil {
		return false, fmt.Errorf("access: %w", err)
	}
	return true, nil
}
