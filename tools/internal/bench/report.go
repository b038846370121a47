package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// The report is Markdown, so that a run's output can go into docs/performance.md
// as it is.

// PrintHeader prints when, where and how the run happened.
func PrintHeader(w io.Writer, m Machine, command, moto string) {
	fmt.Fprintf(w, "## lambdakit bench, %s\n\n", m.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- machine: %d CPUs (%s), %.1f GiB memory, Linux %s\n", m.CPUs, orUnknown(m.CPUModel), m.MemGiB, orUnknown(m.Kernel))
	fmt.Fprintf(w, "- load average (1, 5, 15 min) at the start: %s\n", m.Load)
	fmt.Fprintf(w, "- toolchain: %s\n", m.Go)
	fmt.Fprintf(w, "- local stack: %s\n", moto)
	fmt.Fprintf(w, "- command: `%s`\n\n", command)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// microNames explains each benchmark of lambdakit/bench_test.go, and how
// many records one op is.
var microNames = map[string]struct {
	label   string
	records int
}{
	"IdempotentNewKey":             {"idempotent path, new key: lock, handler, completion", 1},
	"IdempotentDuplicate":          {"idempotent path, duplicate: the store answers", 1},
	"IdempotentDuplicateWarmCache": {"idempotent path, duplicate: the container's cache answers", 1},
	"Batch10NewKeys":               {"batch adapter + idempotent path, new key (batch of 10)", 10},
	"Batch10NewKeysNoMetrics":      {"the same without the metrics line: Batch10NewKeys − this is the metrics' cost per record", 10},
	"Batch10Duplicates":            {"batch adapter + idempotent path, duplicate (batch of 10)", 10},
	"Batch10LogInfo":               {"batch adapter alone, records that succeed, at INFO: no line per record", 10},
	"Batch10LogOff":                {"the same with a logger that discards everything: LogInfo − this is what the disabled DEBUG lines cost", 10},
	"Batch10LogDebug":              {"the same at DEBUG: a \"message done\" line per record", 10},
	"PaymentKeyAndPayloadHash":     {"a payment's key, record ID and payload hash, as the sample reads them (no store)", 1},
	"PayloadBodyHash":              {"the default payload's hash (PayloadBody) of a small body with a nested object and an array", 1},
}

// PrintMicro prints the micro benchmarks per record.
func PrintMicro(w io.Writer, ms []Micro, count int) {
	fmt.Fprintf(w, "### Micro: per record, in-memory store, a handler that does nothing\n\n")
	fmt.Fprintf(w, "`go test -run '^$' -bench . -benchmem -count %d ./lambdakit/`; ns/record is the median of the runs, with their range.\n\n", count)
	fmt.Fprintln(w, "| benchmark | ns/record (range) | B/record | allocs/record |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, m := range ms {
		info, ok := microNames[m.Name]
		if !ok {
			info.label, info.records = m.Name, 1
		}
		per := float64(info.records)
		fmt.Fprintf(w, "| `%s`: %s | %s (%s – %s) | %s | %s |\n", m.Name, info.label,
			num(m.Median()/per, 0), num(m.NsPerOp[0]/per, 0), num(m.NsPerOp[len(m.NsPerOp)-1]/per, 0),
			num(float64(m.BytesPerOp)/per, 0), num(float64(m.AllocsPerOp)/per, 1))
	}
	fmt.Fprintln(w)
}

// E2EConfig is what the end-to-end rows share, for the table's caption.
type E2EConfig struct {
	Records, Concurrency, BatchSize int
	Timeout                         time.Duration
}

// PrintE2E prints the end-to-end rows: for each scenario the payment
// function, the bare floor, and their ratio.
func PrintE2E(w io.Writer, cfg E2EConfig, rows []Row) {
	fmt.Fprintf(w, "### End to end: the real bootstrap, local Runtime API, moto_server\n\n")
	fmt.Fprintf(w, "%d records per row in batches of %d, %d containers invoked at once (records of a batch run concurrently), function timeout %v. "+
		"`lambdakit` is functions/payment; `bare` is tools/bench/bare, aws-lambda-go and the SDK making exactly the requests the design needs; "+
		"`ratio` is lambdakit / bare; `lambdakit+outbox` is lambdakit publishing one payment.charged per charge through dynamostore/outbox (its item in the completion's transaction; the relay's SQS sends are not counted). DynamoDB requests are counted at a proxy in front of moto, retries included. "+
		"Request units are computed from the requests and item sizes by DynamoDB's documented on-demand rules (1 WRU per KB written, twice in a transaction; "+
		"1 RRU per 4 KB read strongly consistent), not measured by moto. Latency is the invocation's duration as the Runtime API saw it; "+
		"CPU is the function processes' CPU time over the row (/proc/<pid>/task/*/schedstat); peak RSS is their largest VmHWM; "+
		"moto CPU is moto_server's, the local stack's own cost. "+
		"`lambdakit+valkey` keeps its idempotency records on a local redis-server instead (the ledger stays on DynamoDB, written by the handler: "+
		"Valkey cannot commit it with the completion); its Valkey commands are counted at a TCP proxy in front of the server (the scripts' own commands not included), "+
		"as are the reads that carried them: commands running at once share a connection and travel together, so the reads count the round trips, roughly.\n\n",
		cfg.Records, cfg.BatchSize, cfg.Concurrency, cfg.Timeout)
	fmt.Fprintln(w, "| scenario | function | records/s | DynamoDB req/record | WRU/record | RRU/record | Valkey cmds (reads)/record | gateway calls/record | p50 ms | p99 ms | CPU µs/record | peak RSS MiB | moto CPU ms/record | failed |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	byScenario := map[string][]Row{}
	var order []string
	for _, r := range rows {
		if _, ok := byScenario[r.Scenario]; !ok {
			order = append(order, r.Scenario)
		}
		byScenario[r.Scenario] = append(byScenario[r.Scenario], r)
	}
	for _, sc := range order {
		rs := byScenario[sc]
		for i, r := range rs {
			name := ""
			if i == 0 {
				name = sc
			}
			cmds := "–"
			if r.Commands >= 0 {
				cmds = num(r.PerRecord(float64(r.Commands)), 2) + " (" + num(r.PerRecord(float64(r.CommandReads)), 2) + ")"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", name, r.Impl,
				num(r.RecordsPerSecond(), 0),
				num(r.PerRecord(float64(r.Usage.Total())), 2),
				num(r.PerRecord(r.Usage.WriteUnits), 2),
				num(r.PerRecord(r.Usage.ReadUnits), 2),
				cmds,
				num(r.PerRecord(float64(r.Gateway)), 2),
				ms(r.Percentile(50)), ms(r.Percentile(99)),
				num(r.PerRecord(float64(r.CPU.Microseconds())), 0),
				num(float64(r.PeakRSS)/1024, 1),
				num(r.PerRecord(float64(r.MotoCPU.Microseconds()))/1000, 2),
				r.Failed)
		}
		lk := slices.IndexFunc(rs, func(r Row) bool { return r.Impl == "lambdakit" })
		bare := slices.IndexFunc(rs, func(r Row) bool { return r.Impl == "bare" })
		if lk >= 0 && bare >= 0 {
			a, b := rs[lk], rs[bare]
			fmt.Fprintf(w, "| | ratio | %s | %s | %s | %s | | %s | %s | %s | %s | %s | %s | |\n",
				ratio(a.RecordsPerSecond(), b.RecordsPerSecond()),
				ratio(float64(a.Usage.Total()), float64(b.Usage.Total())),
				ratio(a.Usage.WriteUnits, b.Usage.WriteUnits),
				ratio(a.Usage.ReadUnits, b.Usage.ReadUnits),
				ratio(float64(a.Gateway), float64(b.Gateway)),
				ratio(float64(a.Percentile(50)), float64(b.Percentile(50))),
				ratio(float64(a.Percentile(99)), float64(b.Percentile(99))),
				ratio(float64(a.CPU), float64(b.CPU)),
				ratio(float64(a.PeakRSS), float64(b.PeakRSS)),
				ratio(float64(a.MotoCPU), float64(b.MotoCPU)))
		}
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.Failed > 0 {
			fmt.Fprintf(w, "- %s, %s: %d records failed, e.g. %s\n", r.Scenario, r.Impl, r.Failed, strings.Join(r.Failures, "; "))
		}
	}
	var ops []string
	for _, r := range rows {
		ops = append(ops, fmt.Sprintf("%s/%s: %s", r.Scenario, r.Impl, opsPerRecord(r)))
	}
	fmt.Fprintf(w, "DynamoDB operations per record: %s.\n\n", strings.Join(ops, "; "))
}

func opsPerRecord(r Row) string {
	if len(r.Usage.Requests) == 0 {
		return "none"
	}
	names := make([]string, 0, len(r.Usage.Requests))
	for op := range r.Usage.Requests {
		names = append(names, op)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, op := range names {
		parts[i] = op + " " + num(r.PerRecord(float64(r.Usage.Requests[op])), 2)
	}
	return strings.Join(parts, ", ")
}

// PrintColdStarts prints the cold-start table, medians over the starts.
func PrintColdStarts(w io.Writer, cs []ColdStart) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintf(w, "### Cold start: a fresh process and its first batch (10 new payments)\n\n")
	fmt.Fprintf(w, "Medians of %d starts each. Init runs from the process's start to its first `invocation/next`. "+
		"Binaries built as `make build-PaymentFunction` builds them (`-tags lambda.norpc -trimpath -ldflags='-s -w'`), for this machine.\n\n", len(cs[0].Init))
	fmt.Fprintln(w, "| function | binary MiB | init ms | first batch ms | RSS after first batch MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, c := range cs {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", c.Impl,
			num(float64(c.BinaryBytes)/(1<<20), 1), ms(median(c.Init)), ms(median(c.FirstBatch)),
			num(float64(medianInt(c.RSS))/1024, 1))
	}
	if len(cs) == 2 {
		a, b := cs[0], cs[1]
		fmt.Fprintf(w, "| ratio | %s | %s | %s | %s |\n",
			ratio(float64(a.BinaryBytes), float64(b.BinaryBytes)), ratio(float64(median(a.Init)), float64(median(b.Init))),
			ratio(float64(median(a.FirstBatch)), float64(median(b.FirstBatch))), ratio(float64(medianInt(a.RSS)), float64(medianInt(b.RSS))))
	}
	fmt.Fprintln(w)
}

// PrintFlat prints a long run thousand by thousand.
func PrintFlat(w io.Writer, moto string, concurrency, batchSize int, run FlatRun) {
	ts := run.Thousands
	total := 0
	for _, t := range ts {
		total += t.Records
	}
	fmt.Fprintf(w, "### Flat cost: %d payments through the payment bootstrap, one thousand at a time\n\n", total)
	fmt.Fprintf(w, "Fresh tables, batches of %d, %d containers at once, as fast as they go; %s. "+
		"records/s counts every record answered, failed or not; a thousand's time runs from its first batch's start to its last one's end.\n\n",
		batchSize, concurrency, moto)
	fmt.Fprintln(w, "| payments | records/s | p50 ms | p99 ms | failed |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	done := 0
	for _, t := range ts {
		fmt.Fprintf(w, "| %d – %d | %s | %s | %s | %d |\n", done+1, done+t.Records,
			num(float64(t.Records)/t.Wall.Seconds(), 0), ms(t.P50), ms(t.P99), t.Failed)
		done += t.Records
	}
	fmt.Fprintln(w)
	if len(ts) >= 2 {
		first, last := ts[0], ts[len(ts)-1]
		fmt.Fprintf(w, "Last thousand / first thousand, records/s: %s. ",
			ratio(float64(last.Records)/last.Wall.Seconds(), float64(first.Records)/first.Wall.Seconds()))
	}
	fmt.Fprintf(w, "moto_server's peak RSS: %s MiB.\n", num(float64(run.MotoRSS)/1024, 0))
	if run.Stopped != "" {
		fmt.Fprintf(w, "The run %s.\n", run.Stopped)
	}
	fmt.Fprintln(w)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianInt(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return num(float64(d)/float64(time.Millisecond), 1) }

// ratio prints a/b as "1.23×"; "=" when both are zero, "–" when only b is.
func ratio(a, b float64) string {
	switch {
	case a == 0 && b == 0:
		return "="
	case b == 0:
		return "–"
	}
	return num(a/b, 2) + "×"
}

// num prints v with prec decimals and thousands separators.
func num(v float64, prec int) string {
	s := fmt.Sprintf("%.*f", prec, v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, r := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	out := b.String()
	if frac != "" {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

// lambdaPayloadLimit is Lambda's limit on a synchronous invocation's
// payload, which bounds the events an SQS event source mapping builds: 6
// MB, as Lambda counts it.
const lambdaPayloadLimit = 6291456

// PrintBatchSizes prints the batch-size rows, each with its ratios to the
// row of batches of 10 of the same delivery and function.
func PrintBatchSizes(w io.Writer, cfg SizesConfig, rows []SizeRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "### Batch sizes: the real bootstrap, one container, fresh tables\n\n")
	fmt.Fprintf(w, "Bodies of %d bytes (payments padded with a field the function ignores), function timeout %v, one fresh container per row (warmed up with one batch of 10 small payments first). "+
		"`first delivery`: new payments, each charged at the gateway (a conditional PutItem, the charge, a TransactWriteItems). "+
		"`cold redelivery`: payments completed beforehand (their records written into the table as the function leaves them), delivered again (receive count 2) to a container that has not seen them: "+
		"the read ahead answers them (one BatchGetItem per 100 records), what Lambda re-drives after a timeout. "+
		"A size under %d runs as many invocations as make %d records, one after another; larger sizes are one invocation. "+
		"Wall is the invocations' time as the Runtime API saw it; CPU and peak RSS (VmHWM) are the function process's; "+
		"connections are counted at the proxy in front of moto (DynamoDB) and at the gateway: the most open at once during the row (idle ones from the warm-up included), and how many new ones were opened. "+
		"In parentheses: the ratio to the batches of 10 of the same delivery and function. "+
		"The records of a batch run %d at a time (lambdakit.DefaultConcurrency; the floor bounds itself alike).\n\n",
		cfg.BodyBytes, cfg.Timeout, cfg.MinRecords, cfg.MinRecords, lambdakit.DefaultConcurrency)
	if cfg.GatewayDelay > 0 {
		fmt.Fprintf(w, "The gateway answered each charge of the first deliveries after %v.\n\n", cfg.GatewayDelay)
	}
	fmt.Fprintln(w, "| delivery | function | batch size | invocations | event MiB | failed | wall µs/record | CPU µs/record | peak RSS MiB | DynamoDB req/record | DynamoDB conns: max open, new | gateway conns: max open, new |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	base := map[[2]string]SizeRow{}
	for _, r := range rows {
		if r.Size == 10 {
			base[[2]string{r.Delivery, r.Impl}] = r
		}
	}
	over := false
	for _, r := range rows {
		b, hasBase := base[[2]string{r.Delivery, r.Impl}]
		rel := func(v, bv float64) string {
			if !hasBase {
				return ""
			}
			return " (" + ratio(v, bv) + ")"
		}
		wall := r.PerRecord(float64(r.InvocationTime().Microseconds()))
		cpu := r.PerRecord(float64(r.CPU.Microseconds()))
		req := r.PerRecord(float64(r.Usage.Total()))
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %d | %s%s | %s%s | %s%s | %s%s | %d%s, %s new | %d, %s new |\n",
			r.Delivery, r.Impl, num(float64(r.Size), 0), r.Invocations, num(float64(r.EventBytes)/(1<<20), 2), r.Failed,
			num(wall, 0), rel(wall, b.PerRecord(float64(b.InvocationTime().Microseconds()))),
			num(cpu, 0), rel(cpu, b.PerRecord(float64(b.CPU.Microseconds()))),
			num(float64(r.PeakRSS)/1024, 1), rel(float64(r.PeakRSS), float64(b.PeakRSS)),
			num(req, 3), rel(req, b.PerRecord(float64(b.Usage.Total()))),
			r.DBConns.MaxOpen, rel(float64(r.DBConns.MaxOpen), float64(b.DBConns.MaxOpen)), num(float64(r.DBConns.Opened), 0),
			r.GatewayConns.MaxOpen, num(float64(r.GatewayConns.Opened), 0))
		over = over || r.EventBytes > lambdaPayloadLimit
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.Failed > 0 {
			fmt.Fprintf(w, "- %s of %d, %s: %d records failed, e.g. %s\n", r.Delivery, r.Size, r.Impl, r.Failed, strings.Join(r.Failures, "; "))
		}
	}
	if over {
		fmt.Fprintf(w, "An event over %s MiB is more than Lambda hands a function in one invocation (its 6 MB payload limit): with bodies this size, SQS's event source mapping cuts such a batch short of its batch size. "+
			"Those rows measure how the function scales, not a batch AWS would deliver.\n", num(float64(lambdaPayloadLimit)/(1<<20), 1))
	}
	var ops []string
	for _, r := range rows {
		ops = append(ops, fmt.Sprintf("%s of %d/%s: %s", r.Delivery, r.Size, r.Impl, opsPerRecord(r.Row)))
	}
	fmt.Fprintf(w, "DynamoDB operations per record: %s.\n\n", strings.Join(ops, "; "))
}

// PrintGatewayDelay prints the gateway-delay rows: medians of each size's
// invocations, and their ratio.
func PrintGatewayDelay(w io.Writer, rows []DelayRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "### A slow gateway: every charge answered after %v\n\n", rows[0].Delay)
	fmt.Fprintf(w, "One warm container per function, tables of the end-to-end rows; %d batches of 1 new payment and %d of 10, alternating; "+
		"the invocation's duration as the Runtime API saw it, median (range). If a batch's records run concurrently, 10 take about as long as 1.\n\n", len(rows[0].One), len(rows[0].Ten))
	fmt.Fprintln(w, "| function | batch of 1, ms | batch of 10, ms | 10 / 1 | failed |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d |\n", r.Impl, spread(r.One), spread(r.Ten),
			ratio(float64(median(r.Ten)), float64(median(r.One))), r.Failed)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.Failed > 0 {
			fmt.Fprintf(w, "- %s: %d records failed, e.g. %s\n", r.Impl, r.Failed, strings.Join(r.Failures, "; "))
		}
	}
	fmt.Fprintln(w)
}

// spread prints "median (min – max)" in ms.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%s (%s – %s)", ms(median(s)), ms(s[0]), ms(s[len(s)-1]))
}

// PrintCPU prints the side-by-side first-delivery CPU comparison: each
// round, then the median and pooled ratios against the 1.05× target.
func PrintCPU(w io.Writer, c CPUComparison) {
	if len(c.Round) == 0 {
		return
	}
	a, b := c.Impls[0], c.Impls[1]
	fmt.Fprintf(w, "### First delivery: CPU per record, %s against %s, side by side\n\n", a, b)
	kept := "kept for every round"
	if c.RestartEvery > 0 && c.RestartEvery < len(c.Round) {
		kept = fmt.Sprintf("replaced by new ones after every %d rounds", c.RestartEvery)
	}
	fmt.Fprintf(w, "%d rounds of %d new payments per function, in batches of %d, on %d warm containers per function %s (each set warmed up with %d payments first, not measured); "+
		"the two functions run at the same time, each on its own containers and tables, the one started first alternating. CPU is the function processes' CPU time over the round, from the kernel "+
		"(/proc/<pid>/task/*/schedstat), so that neither waiting on moto nor a busy core counts. The target is held to the median of the rounds' ratios. "+
		"Load average (1, 5, 15 min) before: %s; after: %s.\n\n",
		c.Rounds, c.Records, c.BatchSize, c.Concurrency, kept, c.Warmup, c.LoadBefore, c.LoadAfter)
	fmt.Fprintf(w, "| round | containers | first | %s CPU µs/record | %s CPU µs/record | ratio | failed | load (1 min) |\n", a, b)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for i, r := range c.Round {
		load := r.Load
		if f := strings.Fields(load); len(f) > 0 {
			load = f[0]
		}
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %s | %d | %s |\n", i+1, r.Containers, r.First,
			num(float64(c.PerRecord(r, a).Nanoseconds())/1e3, 0), num(float64(c.PerRecord(r, b).Nanoseconds())/1e3, 0),
			ratio(float64(r.CPU[a]), float64(r.CPU[b])), r.Failed[a]+r.Failed[b], load)
	}
	rs := c.Ratios()
	slices.Sort(rs)
	fmt.Fprintf(w, "\nOver every round: %s %s and %s %s µs/record; ratio median %s (rounds %s – %s), pooled %s. "+
		"Target: at most 1.05×, on the median: %s.\n\n",
		a, num(float64(c.Total(a).Nanoseconds())/1e3, 0), b, num(float64(c.Total(b).Nanoseconds())/1e3, 0),
		num(c.MedianRatio(), 3)+"×", num(rs[0], 3)+"×", num(rs[len(rs)-1], 3)+"×", num(c.PooledRatio(), 3)+"×",
		map[bool]string{true: "met", false: "not met"}[c.MedianRatio() <= 1.05])
	if sets := c.SetMedians(); len(sets) > 1 {
		fs := make([]string, len(sets))
		for i, m := range sets {
			fs[i] = num(m, 3) + "×"
		}
		fmt.Fprintf(w, "Median ratio of each set of containers: %s.\n\n", strings.Join(fs, ", "))
	}
	if n := c.FailedTotal(); n > 0 {
		fmt.Fprintf(w, "%d records failed: the rounds measured more than first deliveries.\n\n", n)
	}
}
