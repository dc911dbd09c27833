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

// node is what CheckClusterSync reads of a node: its name from /varz,
// and its JetStream from /jsz. /varz alone will not do: a nats-server
// fills its /varz JetStream section once, on the first /varz request, so a
// node asked while it was still starting JetStream shows none for ever
// after; /jsz is computed on each request.
type node struct {
	ServerName string `json:"server_name"`
	JetStream  struct {
		Disabled bool `json:"disabled"`
		Config   struct {
			SyncAlways   bool          `json:"sync_always"`
			SyncInterval time.Duration `json:"sync_interval"`
		} `json:"config"`
		Meta *struct {
			Leader   string `json:"leader"`
			Replicas []struct {
				Name string `json:"name"`
			} `json:"replicas"`
		} `json:"meta_cluster"`
	}
}

// CheckClusterSync reads the /varz and /jsz of each monitoring URL (a node's
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
// was a node that could not be read or was not yet running JetStream
// (which a retry may overcome: a node's monitoring port answers before
// its JetStream has started).
func checkClusterSync(ctx context.Context, urls []string) (retryable bool, err error) {
	if len(urls) == 0 {
		return false, fmt.Errorf("%w: no monitoring URL to check it with", ErrUnsyncedCluster)
	}
	retry := 0
	synced := map[string]bool{} // node name → sync_always, for the nodes read
	peers := map[string]bool{}
	var problems []string
	for _, u := range urls {
		v, err := readNode(ctx, u)
		if err != nil {
			problems = append(problems, err.Error())
			retry++
			continue
		}
		if v.JetStream.Disabled {
			problems = append(problems, fmt.Sprintf("%s (%s): JetStream is not enabled", v.ServerName, u))
			retry++
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
		return retry == len(problems), fmt.Errorf("%w: %s", ErrUnsyncedCluster, strings.Join(problems, "; "))
	}
	return false, nil
}

func readNode(ctx context.Context, base string) (*node, error) {
	var v node
	if err := getJSON(ctx, base, "/varz", &v); err != nil {
		return nil, err
	}
	if err := getJSON(ctx, base, "/jsz", &v.JetStream); err != nil {
		return nil, err
	}
	return &v, nil
}

// getJSON decodes what a nats-server monitoring endpoint answers.
func getJSON(ctx context.Context, base, path string, into any) error {
	u := strings.TrimSuffix(base, "/") + path
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", base, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(into); err != nil {
		return fmt.Errorf("%s: not a nats-server %s: %w", u, path, err)
	}
	return nil
}
