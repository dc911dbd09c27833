package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

// Log keys and values that every line from the server carries.
const (
	logKeyComponent = "component"
	logKeyServer    = "server"
	logKeyFatal     = "fatal"
	componentNATS   = "nats-server"
)

// The slog levels of the server's log calls; see Config.Logger.
const (
	levelTrace  = slog.LevelDebug - 8
	levelDebug  = slog.LevelDebug - 4
	levelNotice = slog.LevelDebug
)

// slogAdapter implements server.Logger on top of a *slog.Logger. A Fatalf
// call does not exit the process (the nats-server default logger does): it
// is logged as an error and remembered, and Start fails with it.
type slogAdapter struct {
	log *slog.Logger

	mu    sync.Mutex
	fatal error
	fired chan struct{} // closed on the first Fatalf
}

var _ server.Logger = (*slogAdapter)(nil)

func newSlogAdapter(l *slog.Logger, serverName string) *slogAdapter {
	return &slogAdapter{
		log:   l.With(slog.String(logKeyComponent, componentNATS), slog.String(logKeyServer, serverName)),
		fired: make(chan struct{}),
	}
}

// enabled reports whether the handler would keep a line at level, so that the
// server's debug and trace output is switched on only when it is wanted.
func (a *slogAdapter) enabled(level slog.Level) bool {
	return a.log.Enabled(context.Background(), level)
}

func (a *slogAdapter) logf(level slog.Level, format string, v ...any) {
	if !a.enabled(level) {
		return
	}
	a.log.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.logf(levelNotice, format, v...) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.logf(slog.LevelWarn, format, v...) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.logf(slog.LevelError, format, v...) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.logf(levelDebug, format, v...) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.logf(levelTrace, format, v...) }

// Fatalf logs at error level and records the first fatal error; the server
// returns from what it was doing after calling it.
func (a *slogAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.log.Error(msg, slog.Bool(logKeyFatal, true))
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fatal == nil {
		a.fatal = errors.New(msg)
		close(a.fired)
	}
}

// fatalErr returns the first fatal error logged by the server, or nil.
func (a *slogAdapter) fatalErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fatal
}
