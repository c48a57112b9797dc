// What kube-scheduler's NodeResourcesFit pays, per node and per extended resource a pod
// requests, before it looks at the resource at all: fitsRequest (pkg/scheduler/framework/
// plugins/noderesources/fit.go, v1.37.2) calls v1helper.IsExtendedResourceName on each of the
// pod's scalar resources for every node it filters, and that function formats a string and
// validates it as a qualified name (a split and two regular expressions). It does so before
// the ignoredByScheduler check, so a marker resource that kube-scheduler is told to ignore
// still costs it this much per node. docs/performance.md uses the figure to explain why
// scoped ephemeral pods (which carry the marker) cost kube-scheduler more than the same pods
// sent without it.
//
//	cd hack/extended-resource-cost && go test -bench . -benchtime 2s
package cost

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// isExtendedResourceName is v1helper.IsExtendedResourceName past its cheap prefix checks
// (pkg/apis/core/v1/helper/helpers.go), with the same pinned apimachinery.
func isExtendedResourceName(name string) bool {
	nameForQuota := fmt.Sprintf("%s%s", "requests.", name)
	return len(validation.IsQualifiedName(nameForQuota)) == 0
}

func BenchmarkIsExtendedResourceName(b *testing.B) {
	for _, name := range []string{"scheduling.escher.io/extender", "escher.io/tput"} {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if !isExtendedResourceName(name) {
					b.Fatalf("%s is an extended resource name", name)
				}
			}
		})
	}
}
