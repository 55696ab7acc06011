// The terminal bundle's entry: xterm.js and its fit add-on, exposed to the
// page as window.AiodTerm (see build.mjs), with xterm's stylesheet, which
// the page adds once (style()) before it opens a terminal
// (web/static/terminal.js).
import css from '@xterm/xterm/css/xterm.css';

export { Terminal } from '@xterm/xterm';
export { FitAddon } from '@xterm/addon-fit';

let styled = false;

export function style() {
  if (styled) return;
  styled = true;
  const el = document.createElement('style');
  el.textContent = css;
  document.head.appendChild(el);
}
