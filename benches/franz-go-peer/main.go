// franz-go-peer: producer and consumer throughput of franz-go (github.com/twmb/franz-go, pure
// Go), printed in the same machine-readable form as onceflow-perf and the Java peer, so the
// comparison scripts (benches/run-producer-comparison.sh, benches/run-consumer-comparison.sh)
// can put it beside them.
//
//	franz-go-peer produce --bootstrap B --topic T --num-records N --record-size S
//	    [--payload random|fixed] [--acks all|1|0] [--linger-ms 5] [--batch-size BYTES]
//	    [--compression none|gzip|snappy|lz4|zstd] [--idempotence true|false]
//	    [--max-buffered-records 1000000] [--max-buffered-bytes 33554432]
//	    [--transactional-id ID --transaction-duration-ms D] [--tls-ca FILE]
//	franz-go-peer consume --bootstrap B --topic T --num-records N
//	    [--isolation read_committed|read_uncommitted] [--timeout-ms 30000] [--tls-ca FILE]
//
// --tls-ca FILE connects over TLS (Kafka's security.protocol=SSL), trusting the PEM CA
// certificate(s) in FILE only, with the broker's host name checked against its certificate
// (franz-go sets ServerName from the host of each broker it dials), TLS 1.2 or newer, no
// client certificate.
//
// Both end with one line
//
//	franz-go records=N records_per_sec=X mb_per_sec=Y
//
// (mb = 2^20 bytes of record values per second for produce, of keys+values for consume), and
// exit non-zero after it if fewer than N records were acknowledged / read. Timing mirrors
// onceflow-perf (benches/perf/src/main.rs): produce from the first send to the last
// acknowledgement (client creation, connection and producer-id initialisation before it);
// consume from adding the topic to the consumer (its partition lookup included) to the poll
// that reaches N records (client creation and the first connection, a Ping, before it).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const usage = `usage:
  franz-go-peer produce --bootstrap B --topic T --num-records N --record-size S
      [--payload random|fixed] [--acks all|1|0] [--linger-ms MS] [--batch-size BYTES]
      [--compression none|gzip|snappy|lz4|zstd] [--idempotence true|false]
      [--max-buffered-records N] [--max-buffered-bytes BYTES]
      [--transactional-id ID --transaction-duration-ms D] [--tls-ca FILE]
  franz-go-peer consume --bootstrap B --topic T --num-records N
      [--isolation read_committed|read_uncommitted] [--timeout-ms MS] [--tls-ca FILE]
--tls-ca FILE: TLS (security.protocol=SSL) trusting the PEM CA certificate(s) in FILE, host
name verification on, no client certificate.
The last line is machine-readable:
  franz-go records=N records_per_sec=X mb_per_sec=Y`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "produce":
		err = produce(os.Args[2:])
	case "consume":
		err = consume(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Println(usage)
		return
	default:
		err = usageError(fmt.Errorf("unknown command %q", os.Args[1]))
	}
	if err != nil {
		var ue usageErr
		if errors.As(err, &ue) {
			fmt.Fprintf(os.Stderr, "franz-go-peer: %v\n\n%s\n", ue.error, usage)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "franz-go-peer %s: error: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

type usageErr struct{ error }

func usageError(err error) error { return usageErr{err} }

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	return fs
}

func mib(b int64) float64 { return float64(b) / (1024 * 1024) }

// tlsOpts is the client option for --tls-ca: none for "" (plaintext), otherwise TLS trusting
// only the PEM CA certificate(s) in caFile. ServerName is left empty: franz-go sets it from the
// host of each broker it dials (kgo.DialTLSConfig), so the certificate is checked against it.
func tlsOpts(caFile string) ([]kgo.Opt, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", caFile)
	}
	return []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})}, nil
}

func tlsName(caFile string) string {
	if caFile == "" {
		return "off"
	}
	return caFile
}

func printFinal(records int64, secs float64, bytes int64) {
	fmt.Printf("franz-go records=%d records_per_sec=%.1f mb_per_sec=%.2f\n",
		records, float64(records)/secs, mib(bytes)/secs)
}

// splitMix64 is the generator behind Java's SplittableRandom (and onceflow-perf's payload):
// one 64-bit mix and one modulo per byte, about the work ProducerPerformance does per byte.
type splitMix64 uint64

func (s *splitMix64) next() uint64 {
	*s += 0x9E3779B97F4A7C15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// letters fills b with random upper-case ASCII letters.
func (s *splitMix64) letters(b []byte) {
	for i := range b {
		b[i] = byte('A' + (s.next()>>32)%26)
	}
}

// ---------------------------------------------------------------------------------------------
// produce

func produce(args []string) error {
	fs := newFlags("produce")
	bootstrap := fs.String("bootstrap", "127.0.0.1:9092", "bootstrap servers, comma-separated")
	topic := fs.String("topic", "", "topic")
	n := fs.Int64("num-records", 0, "records to send")
	size := fs.Int("record-size", 0, "value size in bytes")
	payload := fs.String("payload", "random", "random|fixed")
	acks := fs.String("acks", "all", "all|1|0")
	lingerMs := fs.Int("linger-ms", 5, "ProducerLinger in ms")
	batchSize := fs.Int("batch-size", 16384, "ProducerBatchMaxBytes")
	compression := fs.String("compression", "none", "none|gzip|snappy|lz4|zstd")
	idempotence := fs.String("idempotence", "true", "true|false")
	maxRecords := fs.Int("max-buffered-records", 1_000_000, "MaxBufferedRecords")
	maxBytes := fs.Int("max-buffered-bytes", 32<<20, "MaxBufferedBytes (key+value bytes)")
	txnID := fs.String("transactional-id", "", "TransactionalID")
	txnMs := fs.Int64("transaction-duration-ms", 0, "commit a transaction every D ms")
	reportMs := fs.Int64("report-interval-ms", 0, "ignored (accepted for symmetry)")
	tlsCA := fs.String("tls-ca", "", "TLS (security.protocol=SSL) trusting this PEM CA file")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	_ = reportMs
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *topic == "" || *n <= 0 || *size < 0 {
		return usageError(errors.New("--topic, --num-records > 0 and --record-size are required"))
	}
	var fresh bool
	switch *payload {
	case "random":
		fresh = true
	case "fixed":
	default:
		return usageError(fmt.Errorf("--payload %s: expected random or fixed", *payload))
	}
	var ackOpt kgo.Acks
	switch *acks {
	case "all", "-1":
		ackOpt = kgo.AllISRAcks()
	case "1":
		ackOpt = kgo.LeaderAck()
	case "0":
		ackOpt = kgo.NoAck()
	default:
		return usageError(fmt.Errorf("--acks %s: expected all, 1 or 0", *acks))
	}
	var codec kgo.CompressionCodec
	switch *compression {
	case "none":
		codec = kgo.NoCompression()
	case "gzip":
		codec = kgo.GzipCompression()
	case "snappy":
		codec = kgo.SnappyCompression()
	case "lz4":
		codec = kgo.Lz4Compression()
	case "zstd":
		codec = kgo.ZstdCompression()
	default:
		return usageError(fmt.Errorf("--compression %s: expected none, gzip, snappy, lz4 or zstd", *compression))
	}
	idem, err := strconv.ParseBool(*idempotence)
	if err != nil {
		return usageError(fmt.Errorf("--idempotence %s: expected true or false", *idempotence))
	}
	if (*txnID != "") != (*txnMs > 0) {
		return usageError(errors.New("--transactional-id and --transaction-duration-ms go together"))
	}
	txn := *txnID != ""
	if txn && !idem {
		return usageError(errors.New("transactions need --idempotence true"))
	}

	// Java's batch.size (and onceflow's) is a target: a record larger than it goes in a batch of
	// its own. franz-go's ProducerBatchMaxBytes is a hard cap that fails such a record, so the
	// cap is raised to fit one record plus the batch and record overhead when needed.
	batchMax := *batchSize
	if need := *size + 128; batchMax < need {
		batchMax = need
		fmt.Printf("franz-go-peer produce: note: batch max bytes raised from %d to %d to fit one %d-byte record\n",
			*batchSize, batchMax, *size)
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.DefaultProduceTopic(*topic),
		kgo.RequiredAcks(ackOpt),
		kgo.ProducerLinger(time.Duration(*lingerMs) * time.Millisecond),
		kgo.ProducerBatchMaxBytes(int32(batchMax)),
		kgo.ProducerBatchCompression(codec),
		kgo.MaxBufferedRecords(*maxRecords),
		kgo.MaxBufferedBytes(*maxBytes),
	}
	if !idem {
		// Without idempotence franz-go allows 1 produce request in flight per broker by
		// default; Java's max.in.flight.requests.per.connection (and onceflow's) is 5. With
		// idempotence franz-go uses 5 (this option has no effect then).
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5))
	}
	if txn {
		opts = append(opts, kgo.TransactionalID(*txnID))
	}
	tlsOpt, err := tlsOpts(*tlsCA)
	if err != nil {
		return err
	}
	opts = append(opts, tlsOpt...)
	fmt.Printf("franz-go-peer produce: topic=%s records=%d record_size=%d payload=%s acks=%s linger_ms=%d "+
		"batch_max_bytes=%d compression=%s idempotence=%t max_buffered_records=%d max_buffered_bytes=%d "+
		"transactional_id=%s transaction_duration_ms=%d tls=%s\n",
		*topic, *n, *size, map[bool]string{true: "random-per-record", false: "fixed"}[fresh], *acks, *lingerMs,
		batchMax, *compression, idem, *maxRecords, *maxBytes, *txnID, *txnMs, tlsName(*tlsCA))

	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := context.Background()
	if idem {
		// Load the producer id (InitProducerId; with a transactional id, the transactional
		// one) before the clock starts, as onceflow-perf calls init_transactions first.
		if _, _, err := cl.ProducerID(ctx); err != nil {
			return fmt.Errorf("producer id: %w", err)
		}
	} else if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}

	var (
		acked, failed atomic.Int64
		firstErrOnce  sync.Once
		firstErr      error
	)
	// One callback for every record: no goroutine or closure per record.
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
			firstErrOnce.Do(func() { firstErr = err })
			return
		}
		acked.Add(1)
	}

	rng := splitMix64(time.Now().UnixNano())
	buf := make([]byte, *size)
	rng.letters(buf)
	fixed := append([]byte(nil), buf...)

	var (
		transactions           int64
		commitTotal, commitMax time.Duration
		sendErr                error
	)
	commit := func() error {
		t := time.Now()
		if err := cl.Flush(ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		d := time.Since(t)
		commitTotal += d
		commitMax = max(commitMax, d)
		transactions++
		return nil
	}
	if txn {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
	}
	txnDur := time.Duration(*txnMs) * time.Millisecond
	start := time.Now()
	txnStarted := start
	for i := int64(0); i < *n; i++ {
		if txn && time.Since(txnStarted) >= txnDur {
			if sendErr = commit(); sendErr != nil {
				break
			}
			if sendErr = cl.BeginTransaction(); sendErr != nil {
				break
			}
			txnStarted = time.Now()
		}
		var value []byte
		if fresh {
			// As ProducerPerformance: refill the one payload buffer, then the record gets
			// its own copy (the client keeps the value until it is acknowledged).
			rng.letters(buf)
			value = make([]byte, len(buf))
			copy(value, buf)
		} else {
			value = fixed
		}
		cl.Produce(ctx, &kgo.Record{Value: value}, promise)
	}
	if txn && sendErr == nil {
		sendErr = commit()
	}
	if err := cl.Flush(ctx); err != nil && sendErr == nil {
		sendErr = fmt.Errorf("flush: %w", err)
	}
	secs := time.Since(start).Seconds()
	if txn {
		fmt.Printf("franz-go-detail transactions=%d commit_ms_total=%.1f commit_ms_avg=%.2f commit_ms_max=%.1f\n",
			transactions, ms(commitTotal), ms(commitTotal)/float64(max(transactions, 1)), ms(commitMax))
	}
	ok := acked.Load()
	fmt.Printf("franz-go-detail elapsed_sec=%.3f failed=%d\n", secs, failed.Load())
	printFinal(ok, secs, ok*int64(*size))
	if firstErr != nil {
		fmt.Fprintf(os.Stderr, "franz-go-peer produce: %d record(s) failed, first error: %v\n", failed.Load(), firstErr)
	}
	if sendErr != nil {
		fmt.Fprintf(os.Stderr, "franz-go-peer produce: %v\n", sendErr)
	}
	if ok < *n {
		return fmt.Errorf("only %d of %d records were acknowledged (%d failed)", ok, *n, failed.Load())
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ---------------------------------------------------------------------------------------------
// consume

func consume(args []string) error {
	fs := newFlags("consume")
	bootstrap := fs.String("bootstrap", "127.0.0.1:9092", "bootstrap servers, comma-separated")
	topic := fs.String("topic", "", "topic")
	n := fs.Int64("num-records", 0, "records to read")
	isolation := fs.String("isolation", "read_uncommitted", "read_committed|read_uncommitted")
	timeoutMs := fs.Int64("timeout-ms", 30_000, "give up after this long without records")
	tlsCA := fs.String("tls-ca", "", "TLS (security.protocol=SSL) trusting this PEM CA file")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *topic == "" || *n <= 0 {
		return usageError(errors.New("--topic and --num-records > 0 are required"))
	}
	var level kgo.IsolationLevel
	switch *isolation {
	case "read_committed":
		level = kgo.ReadCommitted()
	case "read_uncommitted":
		level = kgo.ReadUncommitted()
	default:
		return usageError(fmt.Errorf("--isolation %s: expected read_committed or read_uncommitted", *isolation))
	}
	tlsOpt, err := tlsOpts(*tlsCA)
	if err != nil {
		return err
	}
	fmt.Printf("franz-go-peer consume: topic=%s records=%d isolation=%s tls=%s (direct partition consumption, "+
		"franz-go fetch defaults)\n", *topic, *n, *isolation, tlsName(*tlsCA))
	// No group: a direct consumer, every partition of the topic from its start. Fetch settings
	// are franz-go's defaults (FetchMaxBytes 50 MiB, FetchMaxPartitionBytes 1 MiB,
	// FetchMinBytes 1, FetchMaxWait 5 s).
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(level),
	}, tlsOpt...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := context.Background()
	// Connect first, as onceflow-perf's Consumer::new does before its clock starts.
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	start := time.Now()
	cl.AddConsumeTopics(*topic)
	var records, bytes int64
	var firstRecord time.Duration = -1
	idle := time.Duration(*timeoutMs) * time.Millisecond
	lastData := time.Now()
	for records < *n {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := cl.PollFetches(pctx)
		cancel()
		var fetchErr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && fetchErr == nil {
				fetchErr = fmt.Errorf("%s[%d]: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		got := int64(0)
		fetches.EachRecord(func(r *kgo.Record) {
			got++
			bytes += int64(len(r.Key) + len(r.Value))
		})
		if got == 0 {
			if time.Since(lastData) >= idle {
				fmt.Fprintf(os.Stderr, "franz-go-peer consume: no records for %d ms, stopping\n", *timeoutMs)
				break
			}
			continue
		}
		if firstRecord < 0 {
			firstRecord = time.Since(start)
		}
		lastData = time.Now()
		records += got
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("franz-go-detail first_record_ms=%.1f mb=%.4f\n", ms(firstRecord), mib(bytes))
	printFinal(records, secs, bytes)
	if records < *n {
		return fmt.Errorf("consumed %d of %d requested records", records, *n)
	}
	return nil
}
