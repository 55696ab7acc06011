// The editor bundle's entry: the parts of CodeMirror 6 the notebook page
// uses, exposed to the page as window.AiodCM (see build.mjs). Exported here
// and not yet wired: autocompletion, startCompletion and the tooltip
// helpers, for kernel completion (Tab) and inspection (Shift+Tab) once the
// daemon has a completion route (see complete() in web/static/app.js).
export { EditorState, EditorSelection, Compartment, Prec } from '@codemirror/state';
export {
  EditorView, keymap, drawSelection, highlightSpecialChars, placeholder,
  hoverTooltip, showTooltip,
} from '@codemirror/view';
export {
  defaultKeymap, history, historyKeymap, indentWithTab, undo, redo,
  cursorDocStart, cursorDocEnd,
} from '@codemirror/commands';
export { syntaxHighlighting, bracketMatching, indentOnInput, indentUnit } from '@codemirror/language';
export { classHighlighter } from '@lezer/highlight';
export {
  closeBrackets, closeBracketsKeymap, autocompletion, completionKeymap, startCompletion,
} from '@codemirror/autocomplete';
export { python } from '@codemirror/lang-python';
export { javascript } from '@codemirror/lang-javascript';
export { markdown } from '@codemirror/lang-markdown';
