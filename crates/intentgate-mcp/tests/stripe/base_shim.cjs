// Preloaded with `node --require` by probe.py: NOT an option of @stripe/mcp.
//
// @stripe/agent-toolkit builds its client as `new Stripe(secretKey, { appInfo })` and passes
// no `host`, `port` or `protocol`, and neither it nor the stripe Node SDK reads an
// environment variable for the API base. To see what the tools send, this shim wraps the
// `stripe` module's constructor and adds host, port and protocol (`http`) taken from
// STRIPE_PROBE_HOST and STRIPE_PROBE_PORT. It changes nothing else.
'use strict';
const Module = require('module');

const host = process.env.STRIPE_PROBE_HOST;
const port = process.env.STRIPE_PROBE_PORT;
if (!host || !port) {
  throw new Error('base_shim.cjs needs STRIPE_PROBE_HOST and STRIPE_PROBE_PORT');
}

const originalLoad = Module._load;
const wrapped = new WeakMap();

function wrap(Stripe) {
  if (typeof Stripe !== 'function') return Stripe;
  if (wrapped.has(Stripe)) return wrapped.get(Stripe);
  const proxy = new Proxy(Stripe, {
    construct(target, args) {
      const [key, config = {}] = args;
      return Reflect.construct(target, [key, { ...config, host, port, protocol: 'http' }]);
    },
    apply(target, thisArg, args) {
      const [key, config = {}] = args;
      return Reflect.apply(target, thisArg, [key, { ...config, host, port, protocol: 'http' }]);
    },
    get(target, prop, receiver) {
      if (prop === 'default' || prop === 'Stripe') return proxy;
      return Reflect.get(target, prop, receiver);
    },
  });
  wrapped.set(Stripe, proxy);
  return proxy;
}

Module._load = function load(request, parent, isMain) {
  const exported = originalLoad.call(this, request, parent, isMain);
  return request === 'stripe' ? wrap(exported) : exported;
};
