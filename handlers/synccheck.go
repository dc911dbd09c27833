package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ErrUnsyncedCluster is what CheckClusterSync returns (wrapped) when a
// JetStream node of the cluster does not fsync before it acknowledges, or
// cannot be shown to.
var ErrUnsyncedCluster = errors.New("handlers: the NATS cluster does not fsync acknowledged writes")

// varz is what CheckClusterSync reads of a node's /varz.
type varz struct {
	ServerName string `json:"server_name"`
	JetStream  struct {
		Config *struct {
			SyncAlways   bool          `json:"sync_always"`
			SyncInterval time.Duration `json:"sync_interval"`
		} `json:"config"`
		Meta *struct {
			Leader   string `json:"leader"`
			Replicas []struct {
				Name string `json:"name"`
			} `json:"replicas"`
		} `json:"meta"`
	} `json:"jetstream"`
}

// CheckClusterSync reads the /varz of each monitoring URL (a node's
// http_port: http://host:8222) and returns nil when every JetStream node
// they name — themselves, and every peer of the JetStream cluster any of
// them knows — runs with sync_always (jetstream { sync_interval: always }),
// so that an acknowledged write is on disk. Otherwise it returns an error
// wrapping ErrUnsyncedCluster naming every node that does not, or that no
// URL showed. A NATS client cannot see the setting on the client port
// ($JS.API.INFO does not carry it): the monitoring endpoint is where the
// server shows it.
func CheckClusterSync(ctx context.Context, urls []string) error {
	_, err := checkClusterSync(ctx, urls)
	return err
}

// checkClusterSync is CheckClusterSync, also saying whether every problem
// was a node that could not be read (which a retry may overcome).
func checkClusterSync(ctx context.Context, urls []string) (unreadOnly bool, err error) {
	if len(urls) == 0 {
		return false, fmt.Errorf("%w: no monitoring URL to check it with", ErrUnsyncedCluster)
	}
	unread := 0
	synced := map[string]bool{} // node name → sync_always, for the nodes read
	peers := map[string]bool{}
	var problems []string
	for _, u := range urls {
		v, err := readVarz(ctx, u)
		if err != nil {
			problems = append(problems, err.Error())
			unread++
			continue
		}
		if v.JetStream.Config == nil {
			problems = append(problems, fmt.Sprintf("%s (%s): JetStream is not enabled", v.ServerName, u))
			continue
		}
		synced[v.ServerName] = v.JetStream.Config.SyncAlways
		if !v.JetStream.Config.SyncAlways {
			problems = append(problems, fmt.Sprintf("%s (%s): sync_interval is %s, not always", v.ServerName, u,
				v.JetStream.Config.SyncInterval))
		}
		if m := v.JetStream.Meta; m != nil {
			if m.Leader != "" {
				peers[m.Leader] = true
			}
			for _, r := range m.Replicas {
				peers[r.Name] = true
			}
		}
	}
	var unseen []string
	for p := range peers {
		if _, ok := synced[p]; !ok {
			unseen = append(unseen, p)
		}
	}
	if len(unseen) > 0 {
		slices.Sort(unseen)
		problems = append(problems, fmt.Sprintf("no monitoring URL given for the JetStream node(s) %s: list every node", strings.Join(unseen, ", ")))
	}
	if len(problems) > 0 {
		return unread == len(problems), fmt.Errorf("%w: %s", ErrUnsyncedCluster, strings.Join(problems, "; "))
	}
	return false, nil
}

func readVarz(ctx context.Context, base string) (*varz, error) {
	u := strings.TrimSuffix(base, "/") + "/varz"
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	var v varz
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: not a nats-server /varz: %w", u, err)
	}
	return &v, nil
}
