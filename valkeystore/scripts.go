package valkeystore

import "github.com/valkey-io/valkey-go"

// Each record is one hash under one key, and each script touches that key
// only: in a cluster every call goes to the one node that owns the key's
// slot, with no hash tag needed. The scripts compare times with the
// caller's clock (the now argument), never with the server's TIME, so that
// a record counts, and stops counting, at the same instant on this store as
// on DynamoDB and in memory.
//
// The scripts are retryable: when a connection breaks (a server restart,
// a failover, a lost answer), the client resends the script on a new one.
// That is safe because running a script again with the same arguments
// does what its first run did, whether or not that run landed: an acquire
// finds the caller's own lease (which lambdakit takes as acquired), a
// completion completes again under the same lease, a release finds the
// record gone (or, if a successor took the key meanwhile, refuses with
// ErrLeaseLost, which lambdakit takes for a release that landed). A caller's context still bounds the retries.
//
// Field order of every read (HMGET): the decoder depends on it.
var fields = []string{fStatus, fExpiration, fInProgress, fValidation, fData, fLease, fFailure, fEffect}

const (
	fStatus     = "status"
	fExpiration = "expiration"             // epoch seconds
	fInProgress = "in_progress_expiration" // epoch milliseconds
	fValidation = "validation"
	fData       = "data"
	fLease      = "lease"
	fFailure    = "failure"
	fEffect     = "effect"
)

// acquireScript creates the record unless a live one holds the key, and
// returns the live one (its fields, in the order of fields) otherwise,
// nil when it created the record. The rule is dynamostore's condition
// word for word: a record is absent when its expiration (seconds) is at or
// before now in whole seconds, or it is in progress, with no effect kept
// (MarkEffect), and its lease end (ms) is at or before now in ms. A field
// that is missing does not end the record, as a missing attribute fails
// DynamoDB's comparison; nor does one that is no decimal number (time_of,
// which reads what storedtime.Number reads, but for "inf" and hexadecimal
// floats): tonumber alone reads " 5 ", "0x10" or "5\x00x" as times long
// past, and took over a record that decode refuses and that DynamoDB,
// where such a value is no number, never replaces. Only a
// record with a record status (INPROGRESS, COMPLETED) ever ends: a hash
// with another status, or none, is returned as it is, never replaced.
//
// KEYS[1] the record; ARGV: now (s), now (ms), lease, expiration (s; ""
// for none), lease end (ms), validation ("" for none), key expiry (epoch
// ms; "" for none).
var acquireScript = valkey.NewLuaScriptRetryable(`
local function time_of(s)
  if not s then
    return nil
  end
  local m, e = string.match(s, '^([%+%-]?[%d%.]+)(.*)$')
  if not m or not string.find(m, '%d') or string.find(m, '%..*%.')
    or (e ~= '' and not string.find(e, '^[eE][%+%-]?%d+$')) then
    return nil
  end
  return tonumber(s)
end
local f = redis.call('HMGET', KEYS[1], 'status', 'expiration', 'in_progress_expiration', 'validation', 'data', 'lease', 'failure', 'effect')
if redis.call('EXISTS', KEYS[1]) == 1 then
  local exp = time_of(f[2])
  local lease_end = time_of(f[3])
  local known = f[1] == 'INPROGRESS' or f[1] == 'COMPLETED'
  local expired = known and ((exp ~= nil and exp <= tonumber(ARGV[1]))
    or (f[1] == 'INPROGRESS' and lease_end ~= nil and lease_end <= tonumber(ARGV[2]) and not f[8]))
  if not expired then
    return f
  end
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'status', 'INPROGRESS', 'in_progress_expiration', ARGV[5], 'lease', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'expiration', ARGV[4])
end
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'validation', ARGV[6])
end
if ARGV[7] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[7])
end
return false
`)

// completeScript completes the record if it still carries the lease, as
// dynamostore's fenced UpdateItem does: status, expiration, validation,
// failure and effect when given, the result set or removed. It returns 1 when it
// completed the record, 0 when the lease did not match (or no record).
//
// KEYS[1] the record; ARGV: lease, expiration (s; "": kept forever, the
// field removed and the key's expiry too), key expiry (epoch ms; ""),
// validation ("" keeps the stored one), failure ("" keeps the stored one),
// "1" and the result, or "0" and "" for no result, effect ("" keeps the
// stored one).
var completeScript = valkey.NewLuaScriptRetryable(`
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'COMPLETED')
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'expiration', ARGV[2])
else
  redis.call('HDEL', KEYS[1], 'expiration')
end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'validation', ARGV[4])
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'failure', ARGV[5])
end
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'effect', ARGV[8])
end
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'data', ARGV[7])
else
  redis.call('HDEL', KEYS[1], 'data')
end
if ARGV[3] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[3])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
`)

// markEffectScript sets the record's effect if it is in progress under the
// lease, as dynamostore's MarkEffect does. It returns 1 when it did, 0
// when another lease or a completion holds the record (or no record).
//
// KEYS[1] the record; ARGV[1] the lease, ARGV[2] the effect.
var markEffectScript = valkey.NewLuaScriptRetryable(`
local f = redis.call('HMGET', KEYS[1], 'lease', 'status')
if f[1] ~= ARGV[1] or f[2] ~= 'INPROGRESS' then
  return 0
end
redis.call('HSET', KEYS[1], 'effect', ARGV[2])
return 1
`)

// releaseScript deletes the record if it is in progress under the lease.
// It returns 1 when the record is gone (deleted now, or before), 0 when
// another lease or a completion holds it.
//
// KEYS[1] the record; ARGV[1] the lease.
var releaseScript = valkey.NewLuaScriptRetryable(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
local f = redis.call('HMGET', KEYS[1], 'lease', 'status')
if f[1] == ARGV[1] and f[2] == 'INPROGRESS' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)
