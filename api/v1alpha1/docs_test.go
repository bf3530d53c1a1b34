package v1alpha1_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// forbidden are internal references that mean nothing to a reader of "kubectl explain": design rule numbers,
// issue numbers, repository paths and Go identifiers. Cross-references belong in docs/.
var forbidden = []*regexp.Regexp{
	regexp.MustCompile(`DESIGN`), regexp.MustCompile(`(?i)\(rule \d`), regexp.MustCompile(`(?i)\bissue \d`),
	regexp.MustCompile(`docs/|\.go\b|\.md\b`), regexp.MustCompile(`\bMax[A-Z][A-Za-z]+`), regexp.MustCompile(`->`),
	regexp.MustCompile(`metav1\.|SecretKeySelector|DestinationSpec\b`),
}

// lineEnd is how every line of a description ends: controller-gen keeps the comment's line breaks and kubectl
// explain prints them, so a line that does not end a sentence (or introduce a list) is a sentence broken in
// the middle ("map(string, string) with" / "lower-case names").
var lineEnd = regexp.MustCompile(`[.:]["')]*$`)

// The field documentation in the generated CRDs reads as user documentation: whole sentences, no line broken
// mid-sentence, no internal references. Descriptions of Kubernetes' own types (conditions, label selectors,
// apiVersion, kind) are upstream's and are not checked.
func TestCRDDescriptionsReadAsUserDocs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs under config/crd/bases: %v", err)
	}
	checked := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
			walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
				if s == nil {
					return
				}
				if d := s.Description; d != "" {
					checked++
					for _, re := range forbidden {
						if m := re.FindString(d); m != "" {
							t.Errorf("%s: the description refers to %q, which means nothing to a user:\n%s", path, m, d)
						}
					}
					for l := range strings.SplitSeq(d, "\n") {
						if l = strings.TrimSpace(l); l != "" && !lineEnd.MatchString(l) {
							t.Errorf("%s: a description line ends mid-sentence (write the paragraph on one comment line): %q", path, l)
						}
					}
				}
				names := make([]string, 0, len(s.Properties))
				for n := range s.Properties {
					names = append(names, n)
				}
				slices.Sort(names)
				for _, n := range names {
					if n == "conditions" || n == "namespaceSelector" || (path == crd.Spec.Names.Kind && (n == "apiVersion" || n == "kind" || n == "metadata")) {
						continue // Kubernetes' own types
					}
					p := s.Properties[n]
					walk(path+"."+n, &p)
				}
				if s.Items != nil {
					walk(path+"[]", s.Items.Schema)
				}
				if s.AdditionalProperties != nil {
					walk(path+"{}", s.AdditionalProperties.Schema)
				}
			}
			walk(crd.Spec.Names.Kind, v.Schema.OpenAPIV3Schema)
		}
	}
	if checked < 100 {
		t.Errorf("checked only %d descriptions; the walk is broken", checked)
	}
}
