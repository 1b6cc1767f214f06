package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/convert"
)

func newConvertCmd() *cobra.Command {
	var files []string
	var opts convert.Options
	cmd := &cobra.Command{
		Use:   "convert -f FILE [-f MORE]",
		Short: "Convert Kueue queue manifests to Sluice's",
		Long: `convert reads Kueue manifests (kueue.x-k8s.io v1alpha1, v1beta1 and
v1beta2: ResourceFlavor, ClusterQueue, Cohort, LocalQueue,
WorkloadPriorityClass, AdmissionCheck, ProvisioningRequestConfig,
MultiKueueConfig, Topology) and
writes the same objects as sluice.dev/v1beta1 on stdout, with Kueue's renamed
fields (cohortName, parentName) under Sluice's names and status and
server-set metadata left out. Documents of other API groups are written as
they are. A Kueue kind or field Sluice does not implement (MultiKueueCluster,
multiKueue, …) stops the
conversion with exit status 2, naming the file, document, object and field;
--drop-unsupported drops it instead, with a warning on stderr.

With --kueue-labels, job manifests (Jobs, JobSets, Pods, Deployments,
StatefulSets, LeaderWorkerSets, TrainJobs, … any other kind) get Sluice's
names for Kueue's labels and annotations, on the object and on every pod
template inside it: queue-name, priority-class, max-exec-time-seconds,
the pod group's name, total count, serving and fast-admission marks,
job-min-parallelism, elastic-job and the topology annotations. A Kueue label or
annotation Sluice has no counterpart for is unsupported as above. See
docs/migrate-from-kueue.md.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{Err: fmt.Errorf("convert: unexpected argument %q: files go after -f", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usageError{Err: errors.New("convert: give at least one file with -f (- for stdin)")}
			}
			var out []byte
			for i, name := range files {
				var in []byte
				var err error
				if name == "-" {
					name = "<stdin>"
					in, err = io.ReadAll(cmd.InOrStdin())
				} else {
					in, err = os.ReadFile(name)
				}
				if err != nil {
					return usageError{Err: fmt.Errorf("convert: %w", err)}
				}
				res, err := convert.Convert(name, in, opts)
				if err != nil {
					return usageError{Err: fmt.Errorf("convert: %w", err)}
				}
				for _, w := range res.Warnings {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
				}
				if i > 0 && len(out) > 0 && len(res.Output) > 0 {
					out = append(out, "---\n"...)
				}
				out = append(out, res.Output...)
			}
			// Nothing is written unless every file converted.
			_, err := cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().StringArrayVarP(&files, "file", "f", nil, "Kueue manifest file (multi-document YAML); repeat for more, - for stdin")
	cmd.Flags().BoolVar(&opts.DropUnsupported, "drop-unsupported", false, "drop what Sluice does not implement, with a warning, instead of failing")
	cmd.Flags().BoolVar(&opts.KueueLabels, "kueue-labels", false, "also rewrite job manifests (any other kind) and their pod templates: Kueue's labels and annotations under Sluice's names")
	return cmd
}
