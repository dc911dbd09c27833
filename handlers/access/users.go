package access

import (
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/dwr-run/dwr/domain"
)

// AddUser gives member m of workspace ws a fresh identity, as `dwr users
// add` does: it makes a key pair here, has add send m with its public key
// (member.add), then writes the credential to file (mode 0600). The seed
// never leaves this machine. Unless force, an existing file is refused
// before anything is sent, with an error wrapping fs.ErrExist. It returns m
// as sent and the line, written in the file too, that says whose the
// credential is; add's error as it is.
func AddUser(ws string, m domain.AddMember, file string, force bool, add func(domain.AddMember) error) (domain.AddMember, string, error) {
	if !force {
		if _, err := os.Lstat(file); err == nil {
			return m, "", fmt.Errorf("access: %s: %w", file, fs.ErrExist)
		}
	}
	cred, err := NewCredential()
	if err != nil {
		return m, "", err
	}
	m.PublicKey = cred.PublicKey
	if err := add(m); err != nil {
		return m, "", err
	}
	about := fmt.Sprintf("%s, role %s in workspace %s", m.Name, m.Role, ws)
	if len(m.Queues) > 0 {
		about += ", queues " + strings.Join(m.Queues, ",")
	}
	// The file was checked before the member was added: replace what
	// appeared since rather than lose the identity just added.
	return m, about, cred.Write(file, about, true)
}
