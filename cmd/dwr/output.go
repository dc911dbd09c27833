package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows under a header, aligned.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// withClient connects to the service, runs f with the client, and closes
// it.
func (g *globals) withClient(f func(cl *client) error) error {
	cl, err := g.connect()
	if err != nil {
		return err
	}
	defer cl.close()
	return f(cl)
}

// send sends command name with body under command id cmdID (a fresh one
// when empty) and prints its reply about what ("task", "goal").
func (g *globals) send(name string, body any, cmdID, what string) error {
	return g.withClient(func(cl *client) error {
		res, _, err := cl.command(name, body, cmdID)
		if err != nil {
			return err
		}
		return printReply(g, res, what)
	})
}

// show decodes a query's result res into a T and prints it: as JSON with
// --json, else as human writes it.
func show[T any](g *globals, res json.RawMessage, human func(w io.Writer, v T) error) error {
	var v T
	if err := json.Unmarshal(res, &v); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.out, v)
	}
	return human(g.out, v)
}
