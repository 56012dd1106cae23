// Command etcd is upstream's etcd server (go.etcd.io/etcd/server/v3), under the version pinned
// in go.mod; it takes etcd's own flags.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
