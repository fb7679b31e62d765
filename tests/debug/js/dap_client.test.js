// `relayish dap` driven by the VS Code project's own adapter test client (DebugClient of
// @vscode/debugadapter-testsupport), as VS Code drives an adapter.
//
// Run by tests/debug/test_dap.py (test_vscode_debugclient), which writes the program and
// passes one JSON argument: {relayish: path of the `relayish` command, program: path of the
// .rly file, root: the repository, lines: {let_a, cons, let_s}}. By hand:
//     cd tests/debug/js && npm install
//     node --test-reporter=tap dap_client.test.js '{"relayish": ..., ...}'
'use strict';

const assert = require('node:assert');
const { test, beforeEach, afterEach } = require('node:test');
const { DebugClient } = require('@vscode/debugadapter-testsupport');

const config = JSON.parse(process.argv[process.argv.length - 1]);
const { program, lines } = config;
const ARGS = [[1.5, 2]];            // x = [1.5, 2]: @main returns 7.75, its gradient [5, 0]

let dc;

beforeEach(async () => {
  dc = new DebugClient(config.relayish, 'dap', 'relayish', { cwd: config.root, env: process.env });
  dc.defaultTimeout = 30000;
  await dc.start();
});

afterEach(async () => {
  await dc.stop();
});

async function localsOf(frameId) {
  const scopes = await dc.scopesRequest({ frameId });
  const ref = scopes.body.scopes[0].variablesReference;
  const vars = await dc.variablesRequest({ variablesReference: ref });
  return { ref, vars: Object.fromEntries(vars.body.variables.map(v => [v.name, v])) };
}

test('initialize reports the capabilities', async () => {
  const response = await dc.initializeRequest();
  const caps = response.body;
  for (const name of ['supportsConfigurationDoneRequest', 'supportsStepBack',
    'supportsConditionalBreakpoints', 'supportsSetVariable', 'supportsEvaluateForHovers',
    'supportsFunctionBreakpoints']) {
    assert.strictEqual(caps[name], true, name);
  }
});

test('a breakpoint in the recursive match is hit', async () => {
  await dc.hitBreakpoint({ program, args: ARGS }, { path: program, line: lines.cons });
  const trace = await dc.stackTraceRequest({ threadId: 1 });
  assert.deepStrictEqual(trace.body.stackFrames.map(f => f.name), ['@sum_list', '@main']);
});

test('stop on entry, step, inspect, set, evaluate and run to the end', async () => {
  await Promise.all([
    dc.configurationSequence(),
    dc.launch({ program, args: ARGS, stopOnEntry: true }),
    dc.assertStoppedLocation('entry', { path: program, line: lines.let_a }),
  ]);
  const threads = await dc.threadsRequest();
  assert.deepStrictEqual(threads.body.threads, [{ id: 1, name: 'main' }]);

  await Promise.all([dc.nextRequest({ threadId: 1 }),
    dc.assertStoppedLocation('step', { line: lines.let_a + 1 })]);
  await Promise.all([dc.stepBackRequest({ threadId: 1 }),
    dc.assertStoppedLocation('step', { line: lines.let_a })]);
  for (let k = 1; k <= 3; k++) {
    await Promise.all([dc.nextRequest({ threadId: 1 }),
      dc.assertStoppedLocation('step', { line: lines.let_a + k })]);
  }

  // a tensor with its elements, a closure with its captured value, a reference
  let { ref, vars } = await localsOf(0);
  assert.match(vars['%x'].value, /^float64\[2\]/);
  const elements = await dc.variablesRequest({ variablesReference: vars['%x'].variablesReference });
  assert.deepStrictEqual(elements.body.variables.map(v => v.value), ['1.5 (float64)', '2 (float64)']);
  const captured = await dc.variablesRequest({ variablesReference: vars['%scale'].variablesReference });
  assert.strictEqual(captured.body.variables[0].value, '1.5 (float64)');
  const cell = await dc.variablesRequest({ variablesReference: vars['%r'].variablesReference });
  assert.strictEqual(cell.body.variables[0].value, '1.5 (float64)');

  const hover = await dc.evaluateRequest({ expression: '%a * 2f64', frameId: 0, context: 'hover' });
  assert.strictEqual(hover.body.result, '3 (float64)');
  await assert.rejects(dc.evaluateRequest({ expression: '%nosuch', frameId: 0 }), /nosuch/);

  const set = await dc.setVariableRequest({ variablesReference: ref, name: '%a', value: '2' });
  assert.strictEqual(set.body.value, '2 (float64)');
  await assert.rejects(dc.setVariableRequest({ variablesReference: ref, name: '%a', value: '[1, 2]' }),
    /shape/);

  // into the recursion and out of it
  await Promise.all([dc.nextRequest({ threadId: 1 }), dc.assertStoppedLocation('step', {})]);
  await Promise.all([dc.nextRequest({ threadId: 1 }),
    dc.assertStoppedLocation('step', { line: lines.let_s })]);
  await Promise.all([dc.stepInRequest({ threadId: 1 }), dc.assertStoppedLocation('step', {})]);
  let trace = await dc.stackTraceRequest({ threadId: 1 });
  assert.strictEqual(trace.body.stackFrames[0].name, '@sum_list');
  await Promise.all([dc.stepOutRequest({ threadId: 1 }), dc.assertStoppedLocation('step', {})]);
  trace = await dc.stackTraceRequest({ threadId: 1 });
  assert.strictEqual(trace.body.stackFrames[0].name, '@main');

  // %a = 2 after the closure captured it and the reference was made from it:
  // scale(!r) = (1.5 + 1) * 1.5, s = 2 + 2.5
  await Promise.all([
    dc.continueRequest({ threadId: 1 }),
    dc.assertOutput('stdout', '@main returned 8.25\n'),
    dc.waitForEvent('terminated'),
  ]);
});

test('a conditional breakpoint and reverse continue', async () => {
  await Promise.all([
    dc.waitForEvent('initialized').then(() => dc.setBreakpointsRequest({
      source: { path: program },
      breakpoints: [{ line: lines.let_s }, { line: lines.cons, condition: '%h == 2.5f64' }],
    })).then(response => {
      assert.deepStrictEqual(response.body.breakpoints.map(b => b.verified), [true, true]);
      return dc.configurationDoneRequest();
    }),
    dc.launch({ program, args: ARGS }),
    dc.assertStoppedLocation('breakpoint', { line: lines.let_s }),
  ]);
  await Promise.all([dc.continueRequest({ threadId: 1 }),
    dc.assertStoppedLocation('breakpoint', { line: lines.cons })]);
  const { vars } = await localsOf(0);
  assert.strictEqual(vars['%h'].value, '2.5 (float64)');
  await Promise.all([dc.reverseContinueRequest({ threadId: 1 }),
    dc.assertStoppedLocation('breakpoint', { line: lines.let_s })]);
});

test('the gradient program, its text by sourceReference, stepped to the end', async () => {
  await Promise.all([
    dc.configurationSequence(),
    dc.launch({ program, args: ARGS, stopOnEntry: true, grad: true }),
    dc.assertStoppedLocation('entry', {}),
  ]);
  const trace = await dc.stackTraceRequest({ threadId: 1 });
  const source = trace.body.stackFrames[0].source;
  assert.ok(source.sourceReference > 0);
  const text = await dc.sourceRequest({ source, sourceReference: source.sourceReference });
  assert.match(text.body.content, /def @main/);
  const ended = dc.assertOutput('stdout', '@main returned [7.75, [[5.0, 0.0]]]\n');
  for (let k = 0; k < 1000; k++) {
    const stopped = new Promise(resolve => {
      dc.once('stopped', () => resolve(true));
      dc.once('terminated', () => resolve(false));
    });
    await dc.nextRequest({ threadId: 1 });
    if (!(await stopped)) break;
  }
  await ended;
});

test('launch errors come back as error responses', async () => {
  await dc.initializeRequest();
  await assert.rejects(dc.launchRequest({ program: program + '.missing', args: ARGS }),
    /cannot read the file/);
  await assert.rejects(dc.launchRequest({ program, args: [[1, 2, 3]] }), /has shape \(3,\)/);
  await assert.rejects(dc.customRequest('frobnicate'), /unsupported request/);
});
