-- tvmq: leases of queue t on a Redis or a Redis Cluster (docs/client.md,
-- "Leases on Redis"). One script for every lease call, loaded once per
-- server and called by its SHA-1 (EVALSHA; EVAL after NOSCRIPT).
--
-- KEYS (all in the hash slot of "t": "{t}:..." hashes on "t"):
--   1 t            LIST  the records, as pushed (RPUSH t value)
--   2 {t}:stage    LIST  records a blocked consumer moved out of t (BLMOVE), taken before t
--   3 {t}:retry    LIST  ids to deliver again (released, or their lease ran out), taken first
--   4 {t}:leased   ZSET  "<id>-<tag>" of each lease, scored by its deadline (ms, server clock)
--   5 {t}:rec      HASH  "<id>" -> the record, "<id>:n" -> its deliveries so far (absent: 1),
--                        while it is leased or waits to be delivered again
--   6 {t}:delayed  ZSET  ids released with a delay, scored by when they are due (ms)
--   7 {t}:opts     HASH  lease_ms, max_deliveries, dead_letter, max_leases; and "due", kept
--                        here: no score in {t}:leased or {t}:delayed is earlier ("none":
--                        both are empty; absent: not known, the next call looks)
--   8 {t}:stats    HASH  acked, released, expired, redelivered, dead-lettered, dropped
--   9 {t}:seq      STRING the last id or tag given (INCR)
--  10 the dead-letter list: "d" (the queue named by dead_letter), or "{t}:dead"
--     when "d" is in another slot of a cluster (the client then moves it on)
-- ARGV: 1 op (LEASE ACK RELEASE REJECT EXTEND, ACKLEASE: ACK then LEASE), 2
-- the dead_letter the client believes ("" none), 3 "1" when KEYS[10] is
-- "{t}:dead" (its length is returned), 4 LEASE: ms (0: lease_ms); other
-- ops: "<id>-<tag>", 5 RELEASE: delay ms, EXTEND and ACKLEASE: ms.
-- Replies: {"OK", outbox, ...}, {"EMPTY", outbox, ms to the next deadline or
-- -1}, {"DL", dead_letter} (the client's is stale: nothing done), or an
-- error whose first word is the tvm code.
--
-- The common calls are kept to a few commands, each with few arguments
-- (a redis.call costs the server about as much as a client's command, and
-- each argument and reply element more): a lease of a new record HMGET,
-- TIME, LMPOP, INCR, HSET, ZADD; an acknowledgement HGET, TIME, ZREM,
-- HDEL, HINCRBY. What is due is taken back only once the clock has passed
-- "due", not by every call.
local ready, stage, retry, leased, rec, delayed, opts, stats, seq, dead =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local op = ARGV[1]
-- Each field read costs the server: the common calls read only what they
-- need ("due"; a lease also its time and limit), the others all of it.
local o
if op == 'LEASE' or op == 'ACKLEASE' or op == 'EXTEND' then
    o = redis.call('HMGET', opts, 'due', 'lease_ms', 'max_leases')
else
    o = {redis.call('HGET', opts, 'due')}
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- due: no score in leased or delayed is earlier ("none": both are empty;
-- absent, as lTvmCreateQueueEx leaves it: not known yet).
local due = tonumber(o[1])

local outbox = '0'
if ARGV[3] == '1' then
    outbox = false
end

-- No daemon: once the clock passes "due", a call takes back what is due
-- (at most 100 of each), then sets "due" to the earliest score left.
local swept = not o[1] or (due ~= nil and now >= due)

-- The paths that may deliver again or bury (taking back, releasing,
-- rejecting) read every option, and check the dead-letter queue the
-- client believes (it chose KEYS[10] by it) before they change anything.
local dl, max_dlv
if swept or op == 'RELEASE' or op == 'REJECT' then
    local all = redis.call('HMGET', opts, 'lease_ms', 'max_deliveries', 'dead_letter', 'max_leases')
    if not all[1] then
        return redis.error_reply('NOT_SUPPT_OPT queue ' .. ready .. ' has no leases here (no hash ' .. opts ..
            '): set its lease options with lTvmCreateQueueEx')
    end
    dl = all[3] or ''
    if dl ~= ARGV[2] then
        return {'DL', dl}
    end
    max_dlv = tonumber(all[2]) or 0
    o = {o[1], all[1], all[4]}
end

-- A closure costs the server about as much as a command: the helpers of
-- the rarer paths are made only there.
local bury, again
if dl then
    -- The record of id leaves for the dead-letter list (or is dropped).
    bury = function(id)
        local v = redis.call('HGET', rec, id)
        redis.call('HDEL', rec, id, id .. ':n')
        if v and dl ~= '' then
            redis.call('RPUSH', dead, v)
            redis.call('HINCRBY', stats, 'dead-lettered', 1)
        else
            redis.call('HINCRBY', stats, 'dropped', 1)
        end
    end
    -- The record of id is to be delivered again (after delay ms), or
    -- buried at the delivery limit.
    again = function(id, delay)
        if max_dlv > 0 and (tonumber(redis.call('HGET', rec, id .. ':n')) or 1) >= max_dlv then
            bury(id)
        elseif delay > 0 then
            redis.call('ZADD', delayed, now + delay, id)
            if not due or now + delay < due then
                due = now + delay
                redis.call('HSET', opts, 'due', due)
            end
        else
            redis.call('RPUSH', retry, id)
        end
    end
end

if swept then
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 100)) do
        redis.call('ZREM', delayed, id)
        redis.call('RPUSH', retry, id)
    end
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', leased, '-inf', '(' .. now, 'LIMIT', 0, 100)) do
        redis.call('ZREM', leased, m)
        redis.call('HINCRBY', stats, 'expired', 1)
        again(string.match(m, '^(%d+)-'), 0)
    end
    local a = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    local b = redis.call('ZRANGE', leased, 0, 0, 'WITHSCORES')
    due = tonumber(a[2])
    if b[2] and (not due or tonumber(b[2]) < due) then
        due = tonumber(b[2])
    end
    redis.call('HSET', opts, 'due', due or 'none')
end

local ms = ARGV[4]
if op ~= 'LEASE' then
    if op ~= 'ACK' and op ~= 'ACKLEASE' and op ~= 'RELEASE' and op ~= 'REJECT' and op ~= 'EXTEND' then
        return redis.error_reply('ERR unknown lease operation ' .. op)
    end
    local m = ARGV[4]
    local id = string.match(m or '', '^(%d+)-%d+$')
    if not id then
        return redis.error_reply('LEASE_INVALID malformed lease id')
    end
    -- Before "due" every lease in leased is live: removing it is the check.
    -- After it (just swept), the deadline is compared (the sweep takes at
    -- most 100).
    if swept then
        local deadline = redis.call('ZSCORE', leased, m)
        if deadline and tonumber(deadline) < now then
            redis.call('ZREM', leased, m)
            redis.call('HINCRBY', stats, 'expired', 1)
            again(id, 0)
            return redis.error_reply('LEASE_EXPIRED the lease ran out ' .. (now - tonumber(deadline)) .. ' ms ago')
        end
    end
    if redis.call('ZREM', leased, m) == 0 then
        return redis.error_reply('LEASE_EXPIRED no such lease of queue ' .. ready ..
            ': it ran out, was ended, or the record was delivered again since')
    end
    if op == 'ACK' or op == 'ACKLEASE' then
        redis.call('HDEL', rec, id, id .. ':n')
        redis.call('HINCRBY', stats, 'acked', 1)
        if op == 'ACK' then
            return {'OK', outbox or tostring(redis.call('LLEN', dead))}
        end
        ms = ARGV[5]
    elseif op == 'EXTEND' then
        ms = tonumber(ARGV[5]) or 0
        if ms <= 0 then
            ms = tonumber(o[2]) or 30000
        end
        local n = id .. '-' .. redis.call('INCR', seq)
        redis.call('ZADD', leased, now + ms, n)
        if not due or now + ms < due then
            redis.call('HSET', opts, 'due', now + ms)
        end
        return {'OK', outbox or tostring(redis.call('LLEN', dead)), n}
    else
        if op == 'RELEASE' then
            redis.call('HINCRBY', stats, 'released', 1)
            again(id, tonumber(ARGV[5]) or 0)
        else
            bury(id)
        end
        return {'OK', outbox or tostring(redis.call('LLEN', dead))}
    end
end

-- LEASE, and the lease of ACKLEASE: ms of lease time (0: lease_ms).
ms = tonumber(ms) or 0
if ms <= 0 then
    ms = tonumber(o[2]) or 30000
end
local max_leases = tonumber(o[3]) or 0
if max_leases > 0 and redis.call('ZCARD', leased) >= max_leases then
    return redis.error_reply('LEASE_LIMIT queue ' .. ready .. ' has ' .. max_leases .. ' leases in flight, its maximum')
end
-- Records to deliver again first, then those a blocked consumer staged,
-- then the list's: one LMPOP for the three.
local id, v, n
while true do
    local got = redis.call('LMPOP', 3, retry, stage, ready, 'LEFT')
    if not got then
        -- Empty: the time to the next deadline (exact: this path may look
        -- at the sets).
        local hint = -1
        if due then
            local a = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
            local b = redis.call('ZRANGE', leased, 0, 0, 'WITHSCORES')
            if a[2] then hint = tonumber(a[2]) - now end
            if b[2] then
                local h = tonumber(b[2]) - now + 1
                if hint < 0 or h < hint then hint = h end
            end
        end
        return {'EMPTY', outbox or tostring(redis.call('LLEN', dead)), tostring(hint)}
    end
    if got[1] == retry then
        id = got[2][1]
        local r = redis.call('HMGET', rec, id, id .. ':n')
        v = r[1]
        if v then
            n = (tonumber(r[2]) or 1) + 1
            redis.call('HSET', rec, id .. ':n', n)
            redis.call('HINCRBY', stats, 'redelivered', 1)
            break
        end
    else
        -- A new record: its id is its first tag (made a string once: each
        -- number given to redis.call or joined is formatted again).
        v = got[2][1]
        id = tostring(redis.call('INCR', seq))
        n = '1'
        redis.call('HSET', rec, id, v)
        break
    end
end
local m
if n == '1' then
    m = id .. '-' .. id
else
    m = id .. '-' .. redis.call('INCR', seq)
    n = tostring(n)
end
local at = now + ms
redis.call('ZADD', leased, at, m)
if not due or at < due then
    redis.call('HSET', opts, 'due', at)
end
return {'OK', outbox or tostring(redis.call('LLEN', dead)), m, n, v}
