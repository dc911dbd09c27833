package access

import (
	"fmt"

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
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("access: service key: %w", err)
	}
	pub, err := kp.PublicKey()
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
