package executors

import (
	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors/client"
)

// Credentials returns the options that connect with a dwr credential file
// (what `dwr users add --out FILE` writes, or the admin.creds that `dwr
// serve` creates): client.CredentialOptions, for an executor's connection.
func Credentials(file string) ([]nats.Option, error) { return client.CredentialOptions(file) }
