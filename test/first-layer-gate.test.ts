/** The first-layer gate: streamed GETs get layer buffers back only while no GET waits for its first layer group. */
import { describe, expect, it } from 'vitest';
import { FirstLayerGate } from '../gateway/descriptor-get/first-layer-gate.js';

describe('FirstLayerGate', () => {
  it('runs at once when no GET waits for its first layers, and holds back until every waiting GET has them', () => {
    const gate = new FirstLayerGate();
    const ran: string[] = [];
    gate.whenClear(() => ran.push('clear'));
    expect(ran).toEqual(['clear']);
    const a = gate.begin();
    const b = gate.begin();
    gate.whenClear(() => ran.push('first'));
    gate.whenClear(() => ran.push('second'));
    a();
    a(); // once only: a second call does not release b's hold
    expect(ran).toEqual(['clear']);
    expect(gate.pending).toBe(1);
    b();
    expect(ran).toEqual(['clear', 'first', 'second']);
    expect(gate.pending).toBe(0);
  });
});

describe('FirstLayerGate hold limit', () => {
  it('lets a held-back callback run after the hold limit even while a GET still waits', async () => {
    const gate = new FirstLayerGate(20);
    const done = gate.begin();
    let ran = 0;
    gate.whenClear(() => ran++);
    expect(ran).toBe(0);
    await new Promise((r) => setTimeout(r, 60));
    expect(ran).toBe(1);
    done(); // clearing later does not run it twice
    expect(ran).toBe(1);
  });
});
