// Command etcd is upstream etcd's server entry point, built from the pinned
// go.etcd.io/etcd/server/v3 module so the project needs no release download.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
