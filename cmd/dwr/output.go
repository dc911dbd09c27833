package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dwr-run/dwr/schemas"
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

// short cuts s to n characters at most, marking the cut with "...".
func short(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

// columns returns a printer of items as a table under header, with the row
// that row makes of each.
func columns[T any](header []string, row func(T) []string) func(io.Writer, []T) error {
	return func(w io.Writer, items []T) error {
		rows := make([][]string, len(items))
		for i, v := range items {
			rows[i] = row(v)
		}
		return table(w, header, rows)
	}
}

// show prints v: as JSON with --json, else as human writes it.
func show[V any](g *globals, v V, human func(w io.Writer, v V) error) error {
	if g.json {
		return printJSON(g.out, v)
	}
	return human(g.out, v)
}

// printReply prints a command's result about what ("task", "goal"): as
// JSON with --json, else as a line for people.
func printReply(g *globals, r *schemas.CommandResult, what string) error {
	return show(g, r, func(w io.Writer, r *schemas.CommandResult) error {
		line := what + " " + r.ID
		if r.State != "" {
			line += " is " + r.State
		}
		if r.Attempt > 0 {
			line += fmt.Sprintf(" (attempt %d)", r.Attempt)
		}
		if r.Duplicate {
			line += " (already applied: nothing changed)"
		}
		_, err := fmt.Fprintln(w, line)
		return err
	})
}
