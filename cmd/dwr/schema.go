package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/schemas"
)

func schemaCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "schema [PATH]", Short: "print the wire contract's JSON Schemas (all paths, or one)", Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return printSchemas(g.out, args)
		},
	}
}

func printSchemas(w io.Writer, args []string) error {
	if len(args) == 1 {
		b, ok := schemas.Schema(args[0])
		if !ok {
			return fail(exitNotFound, "no schema %q: run `dwr schema` to list them", args[0])
		}
		_, err := w.Write(b)
		return err
	}
	all := schemas.All()
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintln(w, n)
	}
	return nil
}
