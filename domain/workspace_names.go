package domain

import (
	"fmt"
	"slices"
	"strings"
)

// WorkspaceLister is a World that finds its workspaces by the beginning of
// their names. A World without it lets createWorkspace check only the
// workspaces a new name extends.
type WorkspaceLister interface {
	// WorkspacesExtending returns the names of the workspaces whose names
	// begin with prefix.
	WorkspacesExtending(prefix string) ([]string, error)
}

// WorkspacesExtending returns the workspaces whose names begin with
// prefix, the base's and those the overlay made (WorkspaceLister).
func (o *Overlay) WorkspacesExtending(prefix string) ([]string, error) {
	var names []string
	if wl, ok := o.base.(WorkspaceLister); ok {
		var err error
		if names, err = wl.WorkspacesExtending(prefix); err != nil {
			return nil, err
		}
	}
	for name, w := range o.workspaces {
		if w != nil && strings.HasPrefix(name, prefix) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// checkNameApart refuses a new workspace name that extends another
// workspace's name with '-', or that another's so extends: a queue's work
// consumer is named <prefix>-<workspace>-<queue>, so workspace "a" with
// queue "b-q" and workspace "a-b" with queue "q" would share one — and a
// member of the one could take the other's work items.
func (x *tx) checkNameApart(name string) error {
	for i := range len(name) {
		if name[i] != '-' {
			continue
		}
		w, err := x.o.Workspace(name[:i])
		if err != nil {
			return err
		}
		if w != nil {
			return nameClash(name, name[:i])
		}
	}
	longer, err := x.o.WorkspacesExtending(name + "-")
	if err != nil {
		return err
	}
	if len(longer) > 0 {
		slices.Sort(longer)
		return nameClash(name, longer[0])
	}
	return nil
}

func nameClash(name, other string) error {
	return &Error{Code: CodeConflict, Field: "/name", Message: fmt.Sprintf(
		"workspace %q cannot stand beside workspace %q: a queue's work consumer is named <prefix>-<workspace>-<queue>, "+
			"so a queue of one could share its consumer with a queue of the other; choose a name that neither extends another's with '-' nor is so extended", name, other)}
}
