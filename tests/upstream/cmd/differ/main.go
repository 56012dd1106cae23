// Command differ is the differential suite's runner: it sends one table of request shapes
// through two front doors (kube-apiserver's kube-aggregator and apigw) in front of the same
// upstream backends, normalizes each answer (status, media type, body) and compares them row by
// row. It prints one line per row and exits 1 when a row differs without being listed as
// deliberate, or is listed as deliberate but no longer differs.
//
//	differ -table FILE -pki DIR -a URL -b URL [-admin URL] [-only NAME]
//
// The table (tests/differential/table.yaml) has a `setup` list, requests sent once per door
// straight to -admin (kube-apiserver) to make that door's namespace and grants, and `rows`,
// sent through the door. Each door gets its own namespace (diff-a, diff-b: `{ns}` in a row), so
// the objects one door's rows create never collide with the other's; every answer is
// normalized with its namespace written back as `{ns}`. A row may capture a JSON pointer of its
// answer (`capture: {name: /pointer}`) for later rows of the same door (`{name}`).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Door is one front door and the namespace its rows use.
type Door struct {
	Name, URL, Namespace string
}

func main() {
	table := flag.String("table", "", "the table of request shapes (required)")
	pki := flag.String("pki", "", "the control plane's directory: ca.crt and <user>.crt/.key (required)")
	a := flag.String("a", "", "door A's URL: kube-apiserver, whose kube-aggregator is the spec (required)")
	b := flag.String("b", "", "door B's URL: apigw (required)")
	admin := flag.String("admin", "", "where setup requests go (default: -a)")
	only := flag.String("only", "", "run only the rows whose name contains this")
	flag.Parse()
	if *table == "" || *pki == "" || *a == "" || *b == "" {
		fmt.Fprintln(os.Stderr, "usage: differ -table FILE -pki DIR -a URL -b URL [-admin URL] [-only NAME]")
		os.Exit(2)
	}
	if *admin == "" {
		*admin = *a
	}
	t, err := readTable(*table)
	if err != nil {
		fmt.Fprintf(os.Stderr, "differ: %v\n", err)
		os.Exit(2)
	}
	c := newClients(*pki)
	doors := []Door{{"kube-aggregator", *a, "diff-a"}, {"apigw", *b, "diff-b"}}
	answers := make([][]Answer, len(doors))
	for i, d := range doors {
		if err := runSetup(c, *admin, d, t.Setup); err != nil {
			fmt.Fprintf(os.Stderr, "differ: setup for %s: %v\n", d.Name, err)
			os.Exit(1)
		}
		answers[i] = runRows(c, d, t.Rows, *only)
	}
	failed, same, deliberate := 0, 0, 0
	for i, row := range t.Rows {
		if *only != "" && !strings.Contains(row.Name, *only) {
			continue
		}
		diffs := compare(row, answers[0][i], answers[1][i])
		if len(row.At) > 0 {
			// Only the places listed may differ, and each must.
			var unexpected []string
			found := map[string]bool{}
			for _, d := range diffs {
				if row.expected(d) {
					for _, at := range row.At {
						if place, _, _ := strings.Cut(d, ": "); covers(at, place) {
							found[at] = true
						}
					}
				} else {
					unexpected = append(unexpected, d)
				}
			}
			var gone []string
			for _, at := range row.At {
				if !found[at] {
					gone = append(gone, at)
				}
			}
			switch {
			case len(unexpected) > 0:
				failed++
				fmt.Printf("DIFFERENT   %s (beyond its deliberate places)\n", row.Name)
				show(unexpected)
			case len(gone) > 0:
				failed++
				fmt.Printf("FIXED       %s: no longer differs at %v; drop them from the row\n", row.Name, gone)
			default:
				deliberate++
				fmt.Printf("deliberate  %s: %s\n", row.Name, row.Deliberate)
				show(diffs)
			}
			continue
		}
		switch {
		case len(diffs) == 0 && row.Deliberate == "":
			same++
			fmt.Printf("same        %s\n", row.Name)
		case len(diffs) == 0:
			failed++
			fmt.Printf("FIXED       %s: listed as deliberate (%s) but the doors now agree; drop the reason\n", row.Name, row.Deliberate)
		case row.Deliberate != "":
			deliberate++
			fmt.Printf("deliberate  %s: %s\n", row.Name, row.Deliberate)
			show(diffs)
		default:
			failed++
			fmt.Printf("DIFFERENT   %s\n", row.Name)
			show(diffs)
		}
	}
	fmt.Printf("differential: %d rows: %d same, %d deliberate, %d failed\n", same+deliberate+failed, same, deliberate, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
