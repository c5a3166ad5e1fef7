package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/urfave/cli/v2"
)

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "development helpers (not for production)",
		Subcommands: []*cli.Command{
			{
				Name:  "kafka",
				Usage: "run an in-memory Kafka-protocol broker for development and tests",
				Description: `Runs a local Kafka-protocol broker (franz-go's kfake) until interrupted and
prints its address on stdout. It is for development, demos and tests only:
it keeps everything in memory, listens on 127.0.0.1 only and loses all data
when it stops.

Examples:
  rtrctl dev kafka --listen 127.0.0.1:9092 --partitions 3 --topic orders
  addr=$(rtrctl dev kafka --listen 127.0.0.1:0 & ...)   # port 0 picks a free port`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "listen", Value: "127.0.0.1:9092", Usage: "address to listen on (loopback only; port 0 picks a free one)"},
					&cli.IntFlag{Name: "partitions", Value: 1, Usage: "default number of partitions of new topics"},
					&cli.StringSliceFlag{Name: "topic", Usage: "create this topic at start (repeatable)"},
				},
				Action: func(c *cli.Context) error {
					port, err := loopbackPort(c.String("listen"))
					if err != nil {
						return err
					}
					if c.Int("partitions") < 1 {
						return usagef("use --partitions 1 or more", "bad --partitions %d", c.Int("partitions"))
					}
					return runDevKafka(c.Context, c.App.Writer, devKafkaOptions{
						port: port, partitions: c.Int("partitions"), topics: c.StringSlice("topic"),
					})
				},
			},
		},
	}
}

func loopbackPort(listen string) (int, error) {
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return 0, usagef("use --listen 127.0.0.1:PORT", "bad --listen %q: %v", listen, err)
	}
	if host != "" && host != "127.0.0.1" && host != "localhost" {
		return 0, usagef("use --listen 127.0.0.1:PORT", "the development broker listens on 127.0.0.1 only, not %q", host)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return 0, usagef("use --listen 127.0.0.1:PORT", "bad port in --listen %q", listen)
	}
	return port, nil
}

type devKafkaOptions struct {
	port       int
	partitions int
	topics     []string
}

func runDevKafka(ctx context.Context, w io.Writer, opts devKafkaOptions) error {
	kopts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(opts.port),
		kfake.DefaultNumPartitions(opts.partitions),
		kfake.AllowAutoTopicCreation(),
	}
	if len(opts.topics) > 0 {
		kopts = append(kopts, kfake.SeedTopics(int32(opts.partitions), opts.topics...))
	}
	cluster, err := kfake.NewCluster(kopts...)
	if err != nil {
		return fmt.Errorf("start development kafka broker on port %d: %w", opts.port, err)
	}
	defer cluster.Close()
	addrs := strings.Join(cluster.ListenAddrs(), ",")
	if _, err := fmt.Fprintln(w, addrs); err != nil {
		return err
	}
	slog.Info("development kafka broker running; stop it with Ctrl-C", "brokers", addrs, "partitions", opts.partitions, "topics", opts.topics)
	<-ctx.Done()
	return nil
}
