package client

import (
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/dwr-run/dwr/schemas"
)

// CredentialOptions returns the options that connect with a dwr credential file
// (what `dwr users add --out FILE` writes, or the admin.creds that `dwr
// serve` creates): the file's nkey, and the inbox prefix that the server
// lets that identity subscribe to. The seed is read again at each
// (re)connection, not kept in memory. It returns an error when the file
// cannot be read or holds no user nkey seed.
func CredentialOptions(file string) ([]nats.Option, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("client: credential: %w", err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, fmt.Errorf("client: credential %s: %w", file, err)
	}
	pub, err := kp.PublicKey()
	kp.Wipe()
	if err != nil {
		return nil, fmt.Errorf("client: credential %s: %w", file, err)
	}
	nk, err := nats.NkeyOptionFromSeed(file)
	if err != nil {
		return nil, fmt.Errorf("client: credential %s: %w", file, err)
	}
	return []nats.Option{nk, nats.CustomInboxPrefix(schemas.InboxPrefix(pub))}, nil
}
