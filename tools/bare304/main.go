// Command bare304 is the baseline of the device-poll benchmark
// (cmd/wfm-bench, group poll): a bare net/http server that answers every request
// with a constant 304, as design section 11 defines it.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"sha256:0000000000000000000000000000000000000000000000000000000000000000"`)
		w.WriteHeader(http.StatusNotModified)
	}))
}
