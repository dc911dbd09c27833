package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/dwr-run/dwr/schemas"
)

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
