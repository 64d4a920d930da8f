// flux-drift: the reference for Flotilla's drift detection. It diffs a release manifest
// against a cluster with Flux's own code (github.com/fluxcd/pkg/ssa: normalize and
// jsondiff.UnstructuredList, the options helm-controller's action.Diff passes) and prints
// the result as helm-controller summarizes it, as JSON: {"summary": ..., "error": ...}.
//
// Flotilla's additions are passed in, not assumed: the owner labels its applies add
// (--labels, what Flux's origin-label post-renderer writes into the manifest), its field
// manager (--field-owner) and its own opt-out key (added to Flux's in the exclusion
// selector).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/fluxcd/pkg/ssa/jsondiff"
	ssanormalize "github.com/fluxcd/pkg/ssa/normalize"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	extjsondiff "github.com/wI2L/jsondiff"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

type ignoreRule struct {
	Paths  []string           `json:"paths"`
	Target *jsondiff.Selector `json:"target,omitempty"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig")
	manifest := flag.String("manifest", "", "release manifest file")
	name := flag.String("release-name", "", "release name")
	namespace := flag.String("release-namespace", "", "release namespace")
	labels := flag.String("labels", "", "k=v,... added to every object")
	fieldOwner := flag.String("field-owner", "flotilla", "field manager of the dry runs")
	ignoreJSON := flag.String("ignore", "[]", "spec.driftDetection.ignore as JSON")
	flag.Parse()

	summary, err := diff(*kubeconfig, *manifest, *name, *namespace, *labels, *fieldOwner, *ignoreJSON)
	out := map[string]string{"summary": summary}
	if err != nil {
		out["error"] = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func diff(kubeconfig, manifest, name, namespace, labels, fieldOwner, ignoreJSON string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", err
	}
	c, err := client.New(cfg, client.Options{DryRun: ptr.To(true)})
	if err != nil {
		return "", err
	}
	f, err := os.Open(manifest)
	if err != nil {
		return "", err
	}
	defer f.Close()
	objects, err := ssautil.ReadObjects(f)
	if err != nil {
		return "", fmt.Errorf("failed to read objects from release manifest: %w", err)
	}
	if err = ssanormalize.UnstructuredListWithScheme(objects, c.Scheme()); err != nil {
		return "", fmt.Errorf("failed to normalize release objects: %w", err)
	}
	extra := map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			extra[k] = v
		}
	}
	for _, obj := range objects {
		l := obj.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		for k, v := range extra {
			l[k] = v
		}
		l["app.kubernetes.io/managed-by"] = "Helm"
		obj.SetLabels(l)
		a := obj.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a["meta.helm.sh/release-name"] = name
		a["meta.helm.sh/release-namespace"] = namespace
		obj.SetAnnotations(a)
		if obj.GetNamespace() == "" {
			namespaced, err := apiutil.IsObjectNamespaced(obj, c.Scheme(), c.RESTMapper())
			if err != nil {
				return "", err
			}
			if namespaced {
				obj.SetNamespace(namespace)
			}
		}
	}
	var rules []ignoreRule
	if err := json.Unmarshal([]byte(ignoreJSON), &rules); err != nil {
		return "", err
	}
	opts := []jsondiff.ListOption{
		jsondiff.FieldOwner(fieldOwner),
		jsondiff.ExclusionSelector{
			"helm.toolkit.fluxcd.io/driftDetection": "disabled",
			"helm.flotilla.dev/driftDetection":      "disabled",
		},
		jsondiff.Rationalize(true),
		jsondiff.Graceful(true),
	}
	var ignore jsondiff.IgnoreRules
	for _, r := range rules {
		ignore = append(ignore, jsondiff.IgnoreRule{Paths: r.Paths, Selector: r.Target})
	}
	if len(ignore) > 0 {
		opts = append(opts, ignore)
	}
	set, err := jsondiff.UnstructuredList(context.Background(), c, objects, opts...)
	return summarize(set), err
}

// summarize writes helm-controller's internal/diff SummarizeDiffSet format.
func summarize(set jsondiff.DiffSet) string {
	var b strings.Builder
	for _, d := range set {
		if d == nil {
			continue
		}
		obj := d.DesiredObject
		subject := obj.GetObjectKind().GroupVersionKind().Kind + "/"
		if ns := obj.GetNamespace(); ns != "" {
			subject += ns + "/"
		}
		subject += obj.GetName()
		switch d.Type {
		case jsondiff.DiffTypeCreate:
			b.WriteString(subject + " removed\n")
		case jsondiff.DiffTypeExclude:
			b.WriteString(subject + " excluded\n")
		case jsondiff.DiffTypeUpdate:
			var a, c, r int
			for _, p := range d.Patch {
				switch p.Type {
				case extjsondiff.OperationAdd:
					a++
				case extjsondiff.OperationReplace:
					c++
				case extjsondiff.OperationRemove:
					r++
				}
			}
			fmt.Fprintf(&b, "%s changed (%d additions, %d changes, %d removals)\n", subject, a, c, r)
		}
	}
	return strings.TrimSpace(b.String())
}
