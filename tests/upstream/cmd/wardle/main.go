// Command wardle is upstream's sample-apiserver (k8s.io/sample-apiserver, its own command and
// options) with the three graceful-termination settings of k8s.io/apiserver that kube-apiserver
// and most real aggregated servers expose and sample-apiserver's command does not:
//
//	--shutdown-delay-duration, --shutdown-send-retry-after, --shutdown-watch-termination-grace-period
//
// with kube-apiserver's names and meaning. The rollout scenario (cmd/rollout) runs its replicas
// with them, as an aggregated server is deployed to be rolled. Everything else, and all the
// serving, is sample-apiserver's.
package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	"k8s.io/sample-apiserver/pkg/cmd/server"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	options := server.NewWardleServerOptions(os.Stdout, os.Stderr)
	cmd := server.NewCommandStartWardleServer(ctx, options, false)

	var delay, watchGrace time.Duration
	var retryAfter bool
	flags := cmd.Flags()
	flags.DurationVar(&delay, "shutdown-delay-duration", 0, "time to keep serving normally after SIGTERM, /readyz failing (k8s.io/apiserver's setting)")
	flags.BoolVar(&retryAfter, "shutdown-send-retry-after", false, "answer requests with 429 and Retry-After while in-flight requests drain (k8s.io/apiserver's setting)")
	flags.DurationVar(&watchGrace, "shutdown-watch-termination-grace-period", 0, "how long shutdown waits for watches to end (k8s.io/apiserver's setting)")

	// sample-apiserver's own RunE, with the settings applied to its configuration before the
	// server is made. The flags are bound to options.RecommendedOptions, which the command's
	// copy of the options shares.
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := options.Complete(); err != nil {
			return err
		}
		if err := options.Validate(args); err != nil {
			return err
		}
		config, err := options.Config()
		if err != nil {
			return err
		}
		config.GenericConfig.ShutdownDelayDuration = delay
		config.GenericConfig.ShutdownSendRetryAfter = retryAfter
		config.GenericConfig.ShutdownWatchTerminationGracePeriod = watchGrace
		s, err := config.Complete().New()
		if err != nil {
			return err
		}
		s.GenericAPIServer.AddPostStartHookOrDie("start-sample-server-informers", func(hook genericapiserver.PostStartHookContext) error {
			config.GenericConfig.SharedInformerFactory.Start(hook.Done())
			options.SharedInformerFactory.Start(hook.Done())
			return nil
		})
		return s.GenericAPIServer.PrepareRun().RunWithContext(c.Context())
	}
	os.Exit(cli.Run(cmd))
}
