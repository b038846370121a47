package chaos

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// Report is what a run came to. The fields that must be empty or zero for
// the library to have kept its promises are marked; OK checks them.
type Report struct {
	Seed                             uint64
	Payments, Messages, Deliveries   int
	Processes                        int
	FunctionTimeout                  time.Duration
	Invocations                      map[string]int // by outcome; see AllFailed
	AllFailed                        int            // function errors because every record of the batch failed
	DistinctCharges                  int            // charges the gateway made
	Charged, Declined                int            // ledger rows by status
	StillFailing                     map[string]string
	ChargedTwice                     []string          // must be empty: payments the gateway charged more than once
	CallsAfterCompletion             map[string]int    // must be empty: gateway calls for a payment whose ledger row existed
	Disagreements                    []string          // must be empty: ledger rows that contradict the gateway
	Lost                             map[string]string // must be empty: payment → why it counts as lost
	StuckLocks                       []string          // must be empty: payments whose record is still INPROGRESS at the end
	LeaseLost                        int
	Kills                            map[string]int
	DynamoRequests                   int64
	DynamoFaults                     map[string]int64
	GatewayRequests                  int64
	GatewayUnavailable, GatewaySlow  int64
	GatewayCheckErrors               int64
	ConcurrentDeliveries             int // deliveries of a payment another process was running at the time
	ConcurrentPayments               int // payments with such deliveries
	Reencoded, ReencodedValuesDiffer int // messages
	Mismatches                       int // failures logged as a payload mismatch
	FailuresByKind                   map[string]int
	DuplicatesSkipped                int
	DLQAfterFaults, Redriven, DLQEnd int
	AbandonedBeforeRedrive           int // records left INPROGRESS, lease ended, before the redrive
	MotoRequests                     int64
	MotoBusy                         time.Duration
	BoundReached                     bool
	Elapsed                          time.Duration
}

// OK reports whether every promise held: nothing charged twice, no
// completed payment charged again, the ledger and the gateway agree,
// nothing lost, no lock stuck, and the run finished within its bound.
func (r *Report) OK() bool {
	return len(r.ChargedTwice) == 0 && len(r.CallsAfterCompletion) == 0 && len(r.Disagreements) == 0 &&
		len(r.Lost) == 0 && len(r.StuckLocks) == 0 && !r.BoundReached
}

// account reads the gateway, the tables and the logs, once the processes
// are gone.
func (r *run) account(ctx context.Context) (*Report, error) {
	o := r.opts
	_, _, dlqEnd, deliveries := r.src.counts()
	rep := &Report{
		Seed: o.Seed, Payments: len(r.pays), Messages: len(r.msgs), Deliveries: deliveries,
		Processes: o.Processes, FunctionTimeout: o.FunctionTimeout, DLQEnd: dlqEnd,
		Invocations: map[string]int{}, StillFailing: map[string]string{}, CallsAfterCompletion: map[string]int{},
		Lost: map[string]string{}, Kills: map[string]int{}, DynamoFaults: map[string]int64{},
		MotoRequests: r.gate.Requests(), MotoBusy: r.gate.Busy(),
	}

	charges := map[string]int{}
	for _, c := range r.gw.Charges() {
		charges[c.PaymentID]++
	}
	rep.DistinctCharges = len(r.gw.Charges())
	for id, n := range charges {
		if n > 1 {
			rep.ChargedTwice = append(rep.ChargedTwice, id)
		}
	}

	ledger, err := r.scan(ctx, paymentsTable)
	if err != nil {
		return nil, err
	}
	byID := map[string]int{}
	for i, p := range r.pays {
		byID[p.ID] = i
	}
	rows := map[string]string{} // payment ID → status
	for _, item := range ledger {
		key, status := str(item, ledgerKeyAttr), str(item, "status")
		id, ok := strings.CutPrefix(key, ledgerKey(""))
		if !ok {
			rep.Disagreements = append(rep.Disagreements, key+": a ledger row whose key is not "+ledgerKey("<payment_id>"))
			continue
		}
		if status == "" {
			continue // a record without its ledger fields: in progress, checked below
		}
		rows[id] = status
		i, known := byID[id]
		switch {
		case !known:
			rep.Disagreements = append(rep.Disagreements, id+": a ledger row for no payment of the run")
		case status == "CHARGED":
			rep.Charged++
			if charges[id] == 0 {
				rep.Disagreements = append(rep.Disagreements, id+": CHARGED in the ledger, never charged at the gateway")
			}
			if r.pays[i].declined() {
				rep.Disagreements = append(rep.Disagreements, id+": CHARGED in the ledger for a card the gateway declines")
			}
			if str(item, "charge_id") == "" {
				rep.Disagreements = append(rep.Disagreements, id+": CHARGED in the ledger without a charge_id")
			}
		case status == "DECLINED":
			rep.Declined++
			if charges[id] > 0 || !r.pays[i].declined() {
				rep.Disagreements = append(rep.Disagreements, id+": DECLINED in the ledger, but the gateway charged it or never declines its card")
			}
		default:
			rep.Disagreements = append(rep.Disagreements, fmt.Sprintf("%s: ledger status %q", id, status))
		}
	}

	// Messages by payment, settled or not.
	msgsOf := map[int][]*message{}
	r.src.mu.Lock()
	rep.ConcurrentDeliveries, rep.ConcurrentPayments = r.src.overlaps, len(r.src.overlapped)
	for _, m := range r.msgs {
		msgsOf[m.pay] = append(msgsOf[m.pay], m)
		if m.reencoded {
			rep.Reencoded++
			if m.valuesDiffer {
				rep.ReencodedValuesDiffer++
			}
		}
	}
	for i, p := range r.pays {
		if _, ok := rows[p.ID]; ok {
			continue
		}
		var acked, waiting bool
		var reason string
		for _, m := range msgsOf[i] {
			switch {
			case m.acked:
				acked = true
			case m.state == stateDLQ:
				why := m.lastFailure
				if m.reported {
					why, _ = r.logs.reason(m.id)
				}
				if why != "" {
					reason = why
				}
			default:
				waiting = true
			}
		}
		switch {
		case acked:
			rep.Lost[p.ID] = "a delivery succeeded, but the ledger has no row"
		case reason != "":
			rep.StillFailing[p.ID] = reason
		case waiting:
			rep.Lost[p.ID] = "never settled before the time bound"
		default:
			rep.Lost[p.ID] = "in the dead-letter queue without a logged reason"
		}
	}
	r.src.mu.Unlock()

	// The idempotency records, on the same rows: read again, now.
	records, err := r.scan(ctx, paymentsTable)
	if err != nil {
		return nil, err
	}
	byRecord := map[string]string{}
	for _, p := range r.pays {
		byRecord[ledgerKey(p.ID)] = p.ID
	}
	completed := map[string]bool{}
	for _, item := range records {
		rid, status := str(item, ledgerKeyAttr), str(item, recordStatusAttr)
		id := byRecord[rid]
		if id == "" {
			rep.Disagreements = append(rep.Disagreements, rid+": an idempotency record for no payment of the run")
			continue
		}
		switch lambdakit.IdempotencyStatus(status) {
		case lambdakit.StatusInProgress:
			rep.StuckLocks = append(rep.StuckLocks, id)
		case lambdakit.StatusCompleted:
			completed[id] = true
			if _, ok := rows[id]; !ok {
				rep.Disagreements = append(rep.Disagreements, id+": the idempotency record is COMPLETED, its row has no ledger fields")
			}
		}
	}
	for id := range rows {
		if _, known := byID[id]; known && !completed[id] {
			rep.Disagreements = append(rep.Disagreements, id+": a ledger row, but no COMPLETED idempotency record")
		}
	}

	r.mu.Lock()
	for outcome, n := range r.outcomes {
		rep.Invocations[outcome.String()] += n
	}
	rep.AllFailed = r.allFailed
	maps.Copy(rep.Kills, r.killsBy)
	r.mu.Unlock()

	for _, p := range r.procs {
		rep.DynamoRequests += p.proxy.Requests()
		for f, n := range p.proxy.Injected() {
			rep.DynamoFaults[f.String()] += n
		}
		rep.GatewayRequests += p.front.requests.Load()
		rep.GatewayUnavailable += p.front.unavailable.Load()
		rep.GatewaySlow += p.front.slow.Load()
		rep.GatewayCheckErrors += p.front.checkErrors.Load()
		for id, n := range p.front.callsAfterCompletion() {
			rep.CallsAfterCompletion[id] += n
		}
	}

	r.logs.mu.Lock()
	rep.LeaseLost = r.logs.leaseLost
	rep.Mismatches = r.logs.mismatches
	rep.DuplicatesSkipped = r.logs.duplicates
	rep.FailuresByKind = maps.Clone(r.logs.byReason)
	r.logs.mu.Unlock()

	slices.Sort(rep.ChargedTwice)
	slices.Sort(rep.Disagreements)
	slices.Sort(rep.StuckLocks)
	return rep, nil
}

// WriteTable writes the report as one Markdown table, with the evidence
// for any broken promise after it.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run: seed %d, %d payments in %d messages, %d function processes, function timeout %v\n\n",
		r.Seed, r.Payments, r.Messages, r.Processes, r.FunctionTimeout)
	row := func(what string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", what, v) }
	b.WriteString("| measure | value |\n|---|---:|\n")
	row("deliveries (records handed to the function, retries included)", r.Deliveries)
	row("unique payments", r.Payments)
	row("distinct charges (the gateway's own record)", r.DistinctCharges)
	row("payments charged more than once (must be 0)", len(r.ChargedTwice))
	row("gateway calls for a payment already completed (must be 0)", sum(r.CallsAfterCompletion))
	row("ledger rows that disagree with the gateway or the idempotency records (must be 0)", len(r.Disagreements))
	row("payments lost (must be 0)", len(r.Lost))
	row("&nbsp;&nbsp;charged / declined / still failing with a reason", fmt.Sprintf("%d / %d / %d", r.Charged, r.Declined, len(r.StillFailing)))
	row("locks left stuck after the last lease expired (must be 0)", len(r.StuckLocks))
	row("&nbsp;&nbsp;records left in progress by killed processes before the redrive (leases ended)", r.AbandonedBeforeRedrive)
	row("lease-lost events (function logs)", r.LeaseLost)
	row("time taken", r.Elapsed.Round(time.Second))
	row("invocations: "+strings.Join(outcomeNames(), " / ")+" / every record failed", outcomeCounts(r.Invocations, r.AllFailed))
	row("processes killed: between charge and completion / after a charge / after a DynamoDB write", fmt.Sprintf("%d / %d / %d",
		r.Kills["between charge and completion"], r.Kills["after a new charge, before its answer"], r.Kills["after a DynamoDB request took effect"]))
	row(fmt.Sprintf("DynamoDB faults injected, of %d requests", r.DynamoRequests), faultCounts(r.DynamoFaults))
	row(fmt.Sprintf("gateway: 503 answers / slow answers, of %d requests", r.GatewayRequests), fmt.Sprintf("%d / %d", r.GatewayUnavailable, r.GatewaySlow))
	row("deliveries while another process ran the same payment / payments concerned", fmt.Sprintf("%d / %d", r.ConcurrentDeliveries, r.ConcurrentPayments))
	row("duplicates skipped (function logs)", r.DuplicatesSkipped)
	row("re-encoded copies / with escaped values / failures for a payload mismatch", fmt.Sprintf("%d / %d / %d", r.Reencoded, r.ReencodedValuesDiffer, r.Mismatches))
	row("failed records by reason (function logs)", kindCounts(r.FailuresByKind))
	row("dead-letter queue after the faults / redriven with faults off / left", fmt.Sprintf("%d / %d / %d", r.DLQAfterFaults, r.Redriven, r.DLQEnd))
	row("moto_server requests / time busy", fmt.Sprintf("%d / %v", r.MotoRequests, r.MotoBusy.Round(time.Second)))
	if r.BoundReached {
		b.WriteString("\nThe time bound ended the run before every message settled.\n")
	}
	evidence := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s (%d):\n", title, len(items))
		for i, s := range items {
			if i == 20 {
				fmt.Fprintf(&b, "  ... and %d more\n", len(items)-i)
				break
			}
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	evidence("Charged more than once", r.ChargedTwice)
	evidence("Gateway calls after completion", keyed(r.CallsAfterCompletion, func(n int) string { return strconv.Itoa(n) + " calls" }))
	evidence("Ledger disagreements", r.Disagreements)
	evidence("Lost", keyed(r.Lost, func(s string) string { return s }))
	evidence("Stuck locks", r.StuckLocks)
	evidence("Still failing", keyed(r.StillFailing, func(s string) string { return s }))
	_, err := io.WriteString(w, b.String())
	return err
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func keyed[V any](m map[string]V, show func(V) string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+": "+show(m[k]))
	}
	return out
}

var outcomes = []runtimeapi.Outcome{runtimeapi.OutcomeSuccess, runtimeapi.OutcomeFunctionError,
	runtimeapi.OutcomeCrash, runtimeapi.OutcomeTimeout, runtimeapi.OutcomeInitError}

func outcomeNames() []string {
	var s []string
	for _, o := range outcomes {
		s = append(s, o.String())
	}
	return s
}

func outcomeCounts(m map[string]int, allFailed int) string {
	var s []string
	for _, o := range outcomes {
		s = append(s, strconv.Itoa(m[o.String()]))
	}
	s = append(s, strconv.Itoa(allFailed))
	if n := m[runtimeapi.OutcomeNone.String()]; n > 0 {
		s = append(s, fmt.Sprintf("(%d cut by the bound)", n))
	}
	return strings.Join(s, " / ")
}

func faultCounts(m map[string]int64) string {
	var total int64
	var parts []string
	for f := FaultServerError; f < numFaults; f++ {
		n := m[f.String()]
		total += n
		parts = append(parts, fmt.Sprintf("%d %s", n, f))
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

func kindCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}
