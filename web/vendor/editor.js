// The editor bundle's entry: the parts of CodeMirror 6 the notebook page
// uses, exposed to the page as window.AiodCM (see build.mjs): the editor,
// its keymaps, the languages, and the completion and tooltip parts that
// kernel completion (Tab) and inspection (Shift+Tab) use (web/static/editor.js).
export { EditorState, EditorSelection, Compartment, Prec, StateField, StateEffect } from '@codemirror/state';
export {
  EditorView, keymap, drawSelection, highlightSpecialChars, placeholder,
  hoverTooltip, showTooltip,
} from '@codemirror/view';
export {
  defaultKeymap, history, historyKeymap, indentWithTab, indentMore, indentLess, undo, redo,
  cursorDocStart, cursorDocEnd,
} from '@codemirror/commands';
export { syntaxHighlighting, bracketMatching, indentOnInput, indentUnit } from '@codemirror/language';
export { classHighlighter } from '@lezer/highlight';
export {
  closeBrackets, closeBracketsKeymap, autocompletion, completionKeymap, startCompletion,
  closeCompletion, acceptCompletion, completionStatus, currentCompletions,
} from '@codemirror/autocomplete';
export { python } from '@codemirror/lang-python';
export { javascript } from '@codemirror/lang-javascript';
export { markdown } from '@codemirror/lang-markdown';
