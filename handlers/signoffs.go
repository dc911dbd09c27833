package handlers

import (
	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/projections"
)

// signOffs settles the sign-offs of the approvals a query answers with
// (domain.SettleSignOffs), so that a reader sees counted only the
// sign-offs the next approval would count. It reads the workspace once,
// when an answer first holds a pending approval's sign-off: most answers
// hold none and read nothing more.
type signOffs struct {
	store *projections.Store
	ws    string
	w     *domain.Workspace
	read  bool
	err   error // the workspace's read, once failed
}

// workspace returns the workspace, read on first use.
func (o *signOffs) workspace() *domain.Workspace {
	if !o.read {
		o.read = true
		o.w, o.err = o.store.Workspace(o.ws)
	}
	return o.w
}

// signed reports whether a is a pending approval with sign-offs, the only
// ones that can have a sign-off to drop.
func signed(a *domain.Approval) bool {
	return a.State == domain.ApprovalStatePending && len(a.SignOffs) > 0
}

// task returns t settled: t itself when none of its approvals moves.
func (o *signOffs) task(t *domain.Task) *domain.Task {
	for i := range t.Approvals {
		if signed(&t.Approvals[i]) {
			return domain.SettleTaskSignOffs(o.workspace(), t)
		}
	}
	return t
}

// approval settles v's approval in place (v is the query's own copy).
func (o *signOffs) approval(v *projections.ApprovalView) {
	if signed(&v.Approval) {
		v.Approval = *domain.SettleSignOffs(o.workspace(), &v.Approval)
	}
}
