// cdi_validate loads every CDI spec in one directory with the CDI library Debian ships (the one
// container runtimes of that era embed), as an independent check of the specs topodra writes.
// It prints "error: <file>: <message>" for each problem and "device: <qualified name>" for each
// device it accepted, and exits 1 if there was any error, 2 on bad usage.
//
//	GO111MODULE=off GOPATH=<tmp>:/usr/share/gocode go run cdi_validate.go DIR
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi"
	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi/validate"
	"github.com/container-orchestrated-devices/container-device-interface/schema"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cdi_validate DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		fmt.Fprintf(os.Stderr, "cdi_validate: %q is not a directory\n", dir)
		os.Exit(2)
	}

	// Besides the library's own checks, validate against the JSON schema it embeds.
	cdi.SetSpecValidator(validate.WithSchema(schema.BuiltinSchema()))

	// A cache error is also reported per file by GetErrors; the files name what failed.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if cache == nil {
		fmt.Printf("error: %s: %v\n", dir, err)
		os.Exit(1)
	}

	failed := false
	for d, e := range cache.GetSpecDirErrors() {
		fmt.Printf("error: %s: %v\n", d, e)
		failed = true
	}
	errs := cache.GetErrors()
	paths := make([]string, 0, len(errs))
	for path := range errs {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		for _, e := range errs[path] {
			fmt.Printf("error: %s: %v\n", path, e)
			failed = true
		}
	}
	if err != nil && !failed {
		fmt.Printf("error: %s: %v\n", dir, err)
		failed = true
	}

	devices := cache.ListDevices()
	sort.Strings(devices)
	for _, name := range devices {
		fmt.Printf("device: %s\n", name)
	}
	if failed {
		os.Exit(1)
	}
}
