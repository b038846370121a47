package awsrules_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// The DynamoDB Developer Guide, "Supported data types and naming rules in
// Amazon DynamoDB", section "Number": "Numbers can be positive, negative,
// or zero. Numbers can have up to 38 digits of precision", positive from
// 1E-130 to 9.9999999999999999999999999999999999999E+125, negative from
// -9.9999999999999999999999999999999999999E+125 to -1E-130, and "leading
// and trailing zeroes are trimmed". One case per clause; moto says
// whether moto 5.2.1 enforces the clause (its overflow starts past
// 1E+126, and it does not count digits).
func TestCheckNumberFollowsDynamoDBsNumberRule(t *testing.T) {
	nines := "9." + strings.Repeat("9", 37) // 38 significant digits
	cases := []struct {
		clause string
		n      string
		ok     bool
		moto   bool
	}{
		{"zero", "0", true, true},
		{"zero, negative and with an exponent", "-0.000E+999", true, true},
		{"a negative number", "-12.5", true, true},
		{"an integer", "100", true, true},
		{"38 significant digits", "1" + strings.Repeat("2", 37), true, true},
		{"39 significant digits", "1" + strings.Repeat("2", 38), false, false},
		{"leading zeros do not count as digits", strings.Repeat("0", 10) + "1" + strings.Repeat("2", 37), true, true},
		{"trailing zeros do not count as digits", "1" + strings.Repeat("2", 37) + strings.Repeat("0", 50), true, true},
		{"zeros after the point do not count", "0." + strings.Repeat("0", 20) + "1" + strings.Repeat("2", 37), true, true},
		{"the largest positive", nines + "E+125", true, true},
		{"the largest negative", "-" + nines + "E+125", true, true},
		{"just past the largest", "1E+126", false, false},
		{"far past the largest (1e200)", "1e200", false, true},
		{"the smallest positive", "1E-130", true, true},
		{"the smallest negative", "-1E-130", true, true},
		{"just below the smallest", "1E-131", false, true},
		{"far below the smallest (1e-200)", "1e-200", false, true},
		{"an exponent beyond any int", "1e99999999999999999999", false, true},
		{"not decimal: letters", "abc", false, true},
		{"not decimal: hexadecimal", "0x10", false, true},
		{"not decimal: NaN", "NaN", false, true},
		{"not decimal: Infinity", "Infinity", false, true},
		{"not decimal: an exponent without digits", "1e", false, true},
		{"not decimal: a blank", " 1", false, true},
		{"not decimal: empty", "", false, false},
	}
	client, table := dynamoTable(t, false)
	for i, c := range cases {
		t.Run(c.clause, func(t *testing.T) {
			crossCheck(t, fmt.Sprintf("CheckNumber(%q)", c.n), awsrules.CheckNumber(c.n), c.ok, awsrules.ErrNumber, c.moto,
				putValue(client, table, fmt.Sprint(i), &types.AttributeValueMemberN{Value: c.n}))
		})
	}
}

// The DynamoDB Developer Guide, "Quotas in Amazon DynamoDB": a partition
// key value of at most 2048 bytes, a sort key value of at most 1024
// bytes, an item of at most 400 KB, at most 100 actions in one
// transaction. One case on each side of each limit, on moto, which
// enforces all four; moto refuses items from 405,000 bytes (its comment:
// AWS's limit lies between 409 and 410 KB, which 400 KiB, 409,600 bytes,
// is), so the item's case below the limit is 400,000 bytes.
func TestDynamoDBLimitsAreTheServicesOnMoto(t *testing.T) {
	client, table := dynamoTable(t, true)
	put := func(pk, sk string, extra int) error {
		item := map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: pk},
			"sk": &types.AttributeValueMemberS{Value: sk},
		}
		if extra > 0 {
			// The item's size: names and values.
			n := extra - len("pk") - len(pk) - len("sk") - len(sk) - len("v")
			item["v"] = &types.AttributeValueMemberS{Value: strings.Repeat("v", n)}
		}
		_, err := client.PutItem(ctxFor(t), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
		return err
	}
	transact := func(n int) error {
		items := make([]types.TransactWriteItem, n)
		for i := range items {
			items[i] = types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("t%d-%d", n, i)},
				"sk": &types.AttributeValueMemberS{Value: "s"},
			}}}
		}
		_, err := client.TransactWriteItems(ctxFor(t), &dynamodb.TransactWriteItemsInput{TransactItems: items})
		return err
	}
	cases := []struct {
		limit string
		err   error
		ok    bool
	}{
		{"partition key of MaxPartitionKeyBytes", put(strings.Repeat("p", awsrules.MaxPartitionKeyBytes), "s", 0), true},
		{"partition key of MaxPartitionKeyBytes+1", put(strings.Repeat("p", awsrules.MaxPartitionKeyBytes+1), "s", 0), false},
		{"sort key of MaxSortKeyBytes", put("p", strings.Repeat("s", awsrules.MaxSortKeyBytes), 0), true},
		{"sort key of MaxSortKeyBytes+1", put("p", strings.Repeat("s", awsrules.MaxSortKeyBytes+1), 0), false},
		{"item of 400,000 bytes", put("p1", "s", 400_000), true},
		{"item of MaxItemBytes+1", put("p2", "s", awsrules.MaxItemBytes+1), false},
		{"MaxTransactionItems actions", transact(awsrules.MaxTransactionItems), true},
		{"MaxTransactionItems+1 actions", transact(awsrules.MaxTransactionItems + 1), false},
	}
	for _, c := range cases {
		if (c.err == nil) != c.ok {
			t.Errorf("%s: moto says %v; want ok=%v", c.limit, c.err, c.ok)
		}
	}
}

// The DynamoDB Developer Guide, "Supported data types and naming rules in
// Amazon DynamoDB", section "Sets": each value within a set must be
// unique, and empty sets are not supported; a number set's members are
// numbers, so two spellings of one value are one member, which DynamoDB
// refuses as "Input collection ... contains duplicates". One case per
// clause; moto says whether moto 5.2.1 enforces the clause: it refuses
// an empty set only (it takes ["1", "1"], and 1e200 in a set).
func TestCheckNumberSetFollowsDynamoDBsSetRule(t *testing.T) {
	cases := []struct {
		clause  string
		members []string
		ok      bool
		moto    bool
	}{
		{"one member", []string{"1"}, true, true},
		{"distinct values", []string{"1", "1.5", "-1", "0"}, true, true},
		{"empty", []string{}, false, true},
		{"one value spelled twice alike", []string{"1", "1"}, false, false},
		{"one value with a trailing zero", []string{"1", "1.0"}, false, false},
		{"one value with an exponent and a sign", []string{"100", "+1E2"}, false, false},
		{"one value with leading zeros", []string{"0.5", "00.50"}, false, false},
		{"zero and minus zero", []string{"0", "-0"}, false, false},
		{"a member DynamoDB cannot hold", []string{"1", "1e200"}, false, false},
	}
	client, table := dynamoTable(t, false)
	for i, c := range cases {
		t.Run(c.clause, func(t *testing.T) {
			crossCheck(t, fmt.Sprintf("CheckNumberSet(%q)", c.members), awsrules.CheckNumberSet(c.members), c.ok, awsrules.ErrSet, c.moto,
				putValue(client, table, fmt.Sprint("set", i), &types.AttributeValueMemberNS{Value: c.members}))
		})
	}
}
